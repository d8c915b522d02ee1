package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// floorKey selects the cross-process floor: a token passed around a ring
// of go-redis clients by a script and pub/sub, the fastest that one
// hand-over at a time between processes goes on the server.
const floorKey = "floor"

// floorParties is the size of the ring: as many clients as the contended
// workloads spread their goroutines over.
const floorParties = 4

// passScript hands the token on: it counts the hand-over in KEYS[1] and
// publishes the count on the next party's channel, ARGV[1].
var passScript = redis.NewScript(`
local n = redis.call('INCR', KEYS[1])
redis.call('PUBLISH', ARGV[1], n)
return n
`)

// stopPayload tells a party that the token holder stopped the run.
const stopPayload = "stop"

// floorResult is what the ring measured.
type floorResult struct {
	Parties           int     `json:"parties"`
	Seconds           float64 `json:"seconds"`
	HandOvers         int64   `json:"hand_overs"`
	HandOversPerSec   float64 `json:"hand_overs_per_sec"`
	RoundTripsPerHand float64 `json:"round_trips_per_hand_over"`
	Commands          int64   `json:"commands"` // as commandCalls counts them

	CommandsPerHandOver float64 `json:"commands_per_hand_over"`
	ServerUsPerHandOver float64 `json:"server_cpu_us_per_hand_over"`
	// FairlockHold0PerSec is fairlock's grants/s in hold0 and
	// FairlockRatio that over HandOversPerSec; both 0 when fairlock did
	// not run hold0.
	FairlockHold0PerSec float64 `json:"fairlock_hold0_grants_per_sec"`
	FairlockRatio       float64 `json:"fairlock_hold0_vs_floor"`
}

// A ring is floorParties go-redis clients, each subscribed to a channel of
// its own, as many processes would be.
type ring struct {
	rdbs     []*redis.Client
	subs     []*redis.PubSub // subs[i] is subscribed to channels[i] through rdbs[i]
	channels []string
	hook     *roundTrips // on every client of rdbs
}

// openRing opens n clients of the server described by opts and subscribes
// each to a channel under prefix, returning once every subscription is
// confirmed.
func openRing(ctx context.Context, opts *redis.Options, n int, prefix string) (*ring, error) {
	r := &ring{hook: &roundTrips{}}
	for i := range n {
		rdb := redis.NewClient(opts)
		rdb.AddHook(r.hook)
		r.rdbs = append(r.rdbs, rdb)
		ch := fmt.Sprintf("%s:party:%d", prefix, i)
		ps := rdb.Subscribe(ctx, ch)
		r.subs = append(r.subs, ps)
		r.channels = append(r.channels, ch)
		if _, err := ps.Receive(ctx); err != nil {
			return nil, errors.Join(fmt.Errorf("subscribe %s: %w", ch, err), r.close())
		}
	}
	return r, nil
}

// close closes the subscriptions, which ends any receive under way, then
// the clients.
func (r *ring) close() error {
	var errs []error
	for _, ps := range r.subs {
		errs = append(errs, ps.Close())
	}
	for _, rdb := range r.rdbs {
		errs = append(errs, rdb.Close())
	}
	return errors.Join(errs...)
}

// ringTally is what one run of the ring counted.
type ringTally struct {
	received []int64 // per party: hand-overs it received before the deadline
}

func (t ringTally) handOvers() int64 {
	var n int64
	for _, c := range t.received {
		n += c
	}
	return n
}

// run passes the token around the ring until ctx ends; ctx must have a
// deadline. Party 0 passes first; every party then waits for the message
// of the one before it, counts a hand-over when it came before the
// deadline, and passes to the next. The party that receives the token
// once ctx has ended keeps it and tells the others to stop. key counts
// the passes in Redis. run returns once every party has stopped; after an
// error, or when no party stops within unlockTimeout of the deadline, the
// ring is closed.
func (r *ring) run(ctx context.Context, key string) (ringTally, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		panic("ring.run needs a context with a deadline")
	}
	n := len(r.rdbs)
	t := ringTally{received: make([]int64, n)}
	// Parties receive with a context of their own: the ring stops by
	// messages, and closing the subscriptions after an error.
	bg := context.WithoutCancel(ctx)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		firstEr error // guarded by mu
		closing sync.Once
	)
	fail := func(err error) {
		mu.Lock()
		if firstEr == nil {
			firstEr = err
		}
		mu.Unlock()
		closing.Do(func() { _ = r.close() })
	}
	for i := range n {
		next := r.channels[(i+1)%n]
		wg.Go(func() {
			pass := func() error {
				if err := passScript.Run(bg, r.rdbs[i], []string{key}, next).Err(); err != nil {
					return fmt.Errorf("party %d: pass: %w", i, err)
				}
				return nil
			}
			if i == 0 {
				if err := pass(); err != nil {
					fail(err)
					return
				}
			}
			for {
				msg, err := r.subs[i].ReceiveMessage(bg)
				if err != nil {
					fail(fmt.Errorf("party %d: receive: %w", i, err))
					return
				}
				if msg.Payload == stopPayload {
					return
				}
				if !time.Now().Before(deadline) || ctx.Err() != nil {
					if err := r.stop(bg, i); err != nil {
						fail(err)
					}
					return
				}
				t.received[i]++
				if err := pass(); err != nil {
					fail(err)
					return
				}
			}
		})
	}
	// A token lost on the way (a subscription's connection dropped)
	// would leave every party waiting: the ring then fails.
	done := make(chan struct{})
	var watch sync.WaitGroup
	watch.Go(func() {
		timer := time.NewTimer(time.Until(deadline) + unlockTimeout)
		defer timer.Stop()
		select {
		case <-done:
		case <-timer.C:
			fail(fmt.Errorf("no party stopped within %v of the deadline: the token was lost", unlockTimeout))
		}
	})
	wg.Wait()
	close(done)
	watch.Wait()
	mu.Lock()
	defer mu.Unlock()
	return t, firstEr
}

// stop tells every party but from, which holds the token, to stop.
func (r *ring) stop(ctx context.Context, from int) error {
	for i, ch := range r.channels {
		if i == from {
			continue
		}
		if err := r.rdbs[from].Publish(ctx, ch, stopPayload).Err(); err != nil {
			return fmt.Errorf("party %d: stop %s: %w", from, ch, err)
		}
	}
	return nil
}

// measureFloor runs the ring on srv the way measure runs a library: fresh
// clients, a warm-up of warm on a key of its own, then d measured, with
// the server's counters read at the deadline.
func measureFloor(ctx context.Context, srv *server, d, warm time.Duration, runID string) (res floorResult, err error) {
	prefix := fmt.Sprintf("peers:%s:%s", runID, floorKey)
	r, err := openRing(ctx, srv.opts, floorParties, prefix)
	if err != nil {
		return floorResult{}, err
	}
	defer func() {
		if cerr := r.close(); cerr != nil && err == nil {
			err = fmt.Errorf("close: %w", cerr)
		}
	}()
	if warm > 0 {
		wctx, cancel := context.WithTimeout(ctx, warm)
		_, err := r.run(wctx, prefix+":warm:count")
		cancel()
		if err != nil {
			return floorResult{}, fmt.Errorf("warm-up: %w", err)
		}
	}

	var t ringTally
	before, rd, elapsed, err := measureWindow(ctx, srv, r.hook, d, func(rctx context.Context) (err error) {
		t, err = r.run(rctx, prefix+":count")
		return err
	})
	if err != nil {
		return floorResult{}, err
	}
	h := t.handOvers()
	per := func(x float64) float64 {
		if h == 0 {
			return 0
		}
		return x / float64(h)
	}
	return floorResult{
		Parties:             len(r.rdbs),
		Seconds:             elapsed.Seconds(),
		HandOvers:           h,
		HandOversPerSec:     float64(h) / elapsed.Seconds(),
		RoundTripsPerHand:   per(float64(rd.calls.calls)),
		Commands:            rd.server.commands - before.commands,
		CommandsPerHandOver: per(float64(rd.server.commands - before.commands)),
		ServerUsPerHandOver: per(float64((rd.server.cpu - before.cpu).Microseconds())),
	}, nil
}

// compareToFloor sets fairlock's hold0 figures in f from rows, the results
// of hold0.
func compareToFloor(f *floorResult, rows []result) {
	for _, x := range rows {
		if x.Library == "fairlock" && f.HandOversPerSec > 0 {
			f.FairlockHold0PerSec = x.GrantsPerSec
			f.FairlockRatio = x.GrantsPerSec / f.HandOversPerSec
		}
	}
}

// printFloor prints the table of the ring.
func printFloor(w io.Writer, f floorResult) {
	fmt.Fprintf(w, "\n## cross-process floor (a token passed around %d clients by a script and pub/sub, one hand-over at a time)\n\n", f.Parties)
	fmt.Fprintln(w, "| hand-overs/s | hand-overs | round trips/hand-over | commands/hand-over | server µs/hand-over |")
	fmt.Fprintln(w, "| ---: | ---: | ---: | ---: | ---: |")
	fmt.Fprintf(w, "| %s | %s | %.2f | %.2f | %.1f |\n", group(round(f.HandOversPerSec)), group(f.HandOvers),
		f.RoundTripsPerHand, f.CommandsPerHandOver, f.ServerUsPerHandOver)
}

// floorLine says how fairlock's hold0 compares to the floor.
func floorLine(f floorResult) string {
	return fmt.Sprintf("fairlock, contended hold 0, 4 clients × 4 goroutines: %s grants/s, %s the cross-process floor (%s hand-overs/s)",
		group(round(f.FairlockHold0PerSec)), ratio(f.FairlockRatio), group(round(f.HandOversPerSec)))
}
