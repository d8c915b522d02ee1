package fair

import (
	"context"
	"testing"
	"time"

	"github.com/fairlock/fairlock/internal/redistest"
)

// BenchmarkRedisCallOnAGoroutine compares one go-redis call (a PING) made
// on the caller's goroutine with the same call made on a goroutine of its
// own while the caller waits for it or for its context, as within does
// for a context that can end: what the goroutine alone costs. Run it with
// go test -run '^$' -bench RedisCallOnAGoroutine -benchtime 3s -count 3 ./fair
func BenchmarkRedisCallOnAGoroutine(b *testing.B) {
	srv, err := redistest.Start()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Stop)
	rdb := srv.Client(b)
	b.Run("inline", func(b *testing.B) {
		ctx := context.Background()
		for b.Loop() {
			if err := rdb.Ping(ctx).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("goroutine", func(b *testing.B) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		for b.Loop() {
			done := make(chan error, 1)
			go func() { done <- rdb.Ping(context.WithoutCancel(ctx)).Err() }()
			select {
			case err := <-done:
				if err != nil {
					b.Fatal(err)
				}
			case <-ctx.Done():
				b.Fatal(ctx.Err())
			}
		}
	})
}
