package lua

// The sources of the scripts, for the tests of package lua_test.
var (
	Source        = source
	ShardedSource = shardedSource
)
