package fairlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An observer sends no view whose term is below one it offered, none that
// repeats the last, and to a receiver that falls behind, the latest.
func TestAnObserverNeverGoesBackwardsAndSendsTheLatest(t *testing.T) {
	o := &observer{out: make(chan Leadership), kick: make(chan struct{}, 1)}
	w := &leaderWatch{e: &Election{name: "e"}, ws: &leaderWatches{}, cancel: func() {}, done: make(chan struct{}), obs: map[*observer]bool{o: true}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ended := make(chan struct{})
	go func() {
		o.run(ctx, w)
		close(ended)
	}()
	recv := func() Leadership {
		t.Helper()
		select {
		case l := <-o.out:
			return l
		case <-time.After(5 * time.Second):
			t.Fatal("no view")
			return Leadership{}
		}
	}
	quiet := func() {
		t.Helper()
		select {
		case l := <-o.out:
			t.Fatalf("an unexpected view: %+v", l)
		case <-time.After(50 * time.Millisecond):
		}
	}
	lead := func(term int64, value string) Leadership { return Leadership{Election: "e", Term: term, Value: value} }

	o.offer(Leadership{Election: "e"})
	require.False(t, recv().HasLeader())
	o.offer(lead(5, "a"))
	require.Equal(t, lead(5, "a"), recv())
	o.offer(lead(5, "a"))
	quiet() // the same view again
	o.offer(lead(4, "old"))
	quiet() // backwards: a lagging reading
	o.offer(lead(5, "b"))
	require.Equal(t, lead(5, "b"), recv(), "a new value under the same term")
	o.offer(Leadership{Election: "e"})
	require.False(t, recv().HasLeader(), "no leader is no term: it is sent")
	o.offer(lead(3, "older"))
	quiet()

	// Nobody receives while three views are offered: the latest is sent.
	o.offer(lead(6, "c"))
	o.offer(lead(7, "d"))
	o.offer(lead(8, "e"))
	require.Equal(t, lead(8, "e"), recv())
	quiet()

	cancel()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the observer did not end with its context")
	}
	_, open := <-o.out
	require.False(t, open, "the channel is closed when the context ends")
}
