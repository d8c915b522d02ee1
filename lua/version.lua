-- version.lua: the server's Redis version, for fairlock to choose how its
-- scripts publish wake messages when INFO is refused.
--
-- No KEYS, no ARGV.
--
-- Returns the version as a string ("7.0.15"), or nil on a server older
-- than Redis 7, whose scripts have no redis.REDIS_VERSION. It reads and
-- writes nothing, so it runs as any user that may run scripts.

return redis.REDIS_VERSION
