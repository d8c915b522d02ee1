package notify_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fairlock/fairlock/notify"
	"github.com/redis/go-redis/v9"
)

// A waiter of a lock watches the lock's channel before it queues, then
// waits for a signal or its polling timer, whichever comes first, and looks
// at the lock either way: a signal is only a hint.
func ExampleHub_Watch() {
	rdb := redis.NewClient(&redis.Options{}) // Redis at its default address
	defer rdb.Close()
	hub := notify.New(rdb, notify.Options{})
	defer hub.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w, err := hub.Watch(ctx, "orders:lock:notify", "waiter-7")
	if err != nil {
		fmt.Println("watch:", err)
		return
	}
	defer w.Stop()

	// ... queue for the lock here; the lock's scripts publish
	// "waiter-7 <token>" on the channel when they hand it over ...

	poll := time.NewTimer(100 * time.Millisecond)
	defer poll.Stop()
	select {
	case <-w.C():
		if token, ok := w.Grant(); ok {
			fmt.Println("granted, fencing token", token)
			return
		}
	case <-poll.C:
	case <-ctx.Done():
		return
	}
	fmt.Println("not granted yet: check the queue and wait again")
}
