package notify

import (
	"context"
	"fmt"
	"testing"

	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// BenchmarkPublishToSignal measures the round trip from a PUBLISH to the
// waiter it names being signalled.
func BenchmarkPublishToSignal(b *testing.B) {
	srv := redistest.Shared(b)
	h := newHub(b, srv.Client(b), Options{})
	pub := srv.Client(b)
	w := watch(b, h, redistest.Prefix(b), "w")
	ctx := context.Background()

	for b.Loop() {
		if err := pub.Publish(ctx, w.channel, "w").Err(); err != nil {
			b.Fatal(err)
		}
		<-w.C()
	}
}

// BenchmarkWatchStop measures registering and stopping a waiter on a fresh
// channel: SUBSCRIBE, the confirming PING round trip, and UNSUBSCRIBE.
func BenchmarkWatchStop(b *testing.B) {
	srv := redistest.Shared(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { _ = rdb.Close() })
	h := newHub(b, rdb, Options{})
	prefix := redistest.Prefix(b)
	ctx := context.Background()

	i := 0
	for b.Loop() {
		i++
		w, err := h.Watch(ctx, fmt.Sprintf("%s:%d", prefix, i), "w")
		if err != nil {
			b.Fatal(err)
		}
		w.Stop()
	}
}
