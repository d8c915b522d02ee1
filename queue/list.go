package queue

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/internal/errs"
)

// Scanner is what List needs of a go-redis client.
type Scanner interface {
	Scan(ctx context.Context, cursor uint64, match string, count int64) *redis.ScanCmd
}

var _ Scanner = (redis.UniversalClient)(nil)

// scanCount is the COUNT of each SCAN: how many keys a server looks at
// per call.
const scanCount = 1000

// List returns the names of the locks under prefix, of every kind, that
// are held (their Lock key exists) or waited on (their Queue key exists)
// and whose names
// match the glob pattern ("" matches every name), each once, sorted. It
// scans with SCAN, never KEYS: every master of a *redis.ClusterClient,
// every live shard of a *redis.Ring, and any other client as one server.
// Like Inspect it is a debugging aid: a lock may be taken or freed while
// the scan runs. A pattern with '}' or ending in a lone '\' (no name can
// match it) fails with errs.ErrInvalidName.
func List(ctx context.Context, rdb Scanner, prefix, pattern string) ([]string, error) {
	match, err := listMatch(prefix, pattern)
	if err != nil {
		return nil, err
	}
	var (
		mu    sync.Mutex // guards names; a cluster's masters are scanned at once
		names = map[string]struct{}{}
	)
	scan := func(ctx context.Context, node Scanner) error {
		var cursor uint64
		for {
			keys, next, err := node.Scan(ctx, cursor, match, scanCount).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			for _, key := range keys {
				if name, ok := lockOf(prefix, key); ok {
					names[name] = struct{}{}
				}
			}
			mu.Unlock()
			if cursor = next; cursor == 0 {
				return ctx.Err()
			}
		}
	}
	switch r := rdb.(type) {
	case *redis.ClusterClient:
		err = r.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	case *redis.Ring:
		err = r.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	default:
		err = scan(ctx, rdb)
	}
	if err != nil {
		return nil, fmt.Errorf("fairlock: list %q: %w", pattern, err)
	}
	list := make([]string, 0, len(names))
	for n := range names {
		list = append(list, n)
	}
	slices.Sort(list)
	return list, nil
}

// listMatch returns the SCAN MATCH pattern of the keys of the locks under
// prefix whose names match pattern. Every key of a lock is
// "<prefix>:{<name>}" and a suffix, and neither a name nor a suffix holds
// a '}': so in "<prefix>:{<pattern>}*" the '}' can only meet the one that
// ends the name, and pattern is matched against the name alone.
func listMatch(prefix, pattern string) (string, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return "", err
	}
	if pattern == "" {
		pattern = "*"
	}
	trailing := len(pattern) - len(strings.TrimRight(pattern, `\`))
	switch {
	case len(pattern) > MaxNameLen:
		return "", fmt.Errorf("%w: pattern of %d bytes, more than %d", errs.ErrInvalidName, len(pattern), MaxNameLen)
	case !utf8.ValidString(pattern):
		return "", fmt.Errorf("%w: pattern not valid UTF-8", errs.ErrInvalidName)
	case strings.ContainsRune(pattern, '}'):
		return "", fmt.Errorf("%w: pattern %q contains '}'", errs.ErrInvalidName, pattern)
	case trailing%2 == 1:
		return "", fmt.Errorf("%w: pattern %q ends in a lone '\\'", errs.ErrInvalidName, pattern)
	}
	return escapeGlob(prefix) + ":{" + pattern + "}*", nil
}

// escapeGlob escapes the characters that are special in a Redis glob.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// lockOf returns the name of the lock whose Lock or Queue key is key, of
// any kind (a Mutex's, a Semaphore's, a RWMutex's, an Election's, a
// quorum lock's on one master), and false for any other key.
func lockOf(prefix, key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, prefix+":{")
	if !ok {
		return "", false
	}
	name, suffix, ok := strings.Cut(rest, "}")
	if !ok || name == "" {
		return "", false
	}
	suffix = strings.TrimSuffix(suffix, ":queue")
	switch suffix {
	case "", ":" + KindSemaphore, ":" + KindRWMutex, ":q", ":e", ":e:q":
		return name, true
	}
	return "", false
}
