package queue_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/queue"
)

// The checkers of the tickets' invariants, fed hand-made states of the
// locks a, b and c: each finds the violation it is written for, and
// passes the same states without it.
func TestTicketCheckersCatchEachViolation(t *testing.T) {
	const now = 1000
	keys := []string{"a", "b", "c"}
	tk := func(n int) string {
		return queue.Entry(fmt.Sprintf("%016x0000abcd%s", n, queue.TicketVersion), time.Second, "m")
	}
	single := queue.Entry("0000000000000009", time.Second, "w")
	holder := queue.Entry("0000000000000008", time.Second, "h")
	t1, t2 := tk(1), tk(2)
	sets := map[string][]int{t1: {0, 1}, t2: {0, 1}}
	held := func(entry string, token int64) *queue.HoldState {
		return &queue.HoldState{Owner: "m", Count: 1, Token: token, Entry: entry}
	}
	// waiting returns the state of a free lock with entries in line, all
	// live, and the keys of the tickets among them.
	waiting := func(entries ...string) queue.State {
		s := queue.State{Now: now, Queue: entries, Deadlines: map[string]int64{}, Tickets: map[string]queue.TicketList{}}
		for _, e := range entries {
			s.Deadlines[e] = now + 10
			if queue.IsTicket(e) {
				s.Tickets[queue.WaiterIDOf(e)] = queue.TicketList{Locks: []string{"a", "b"}, ExpiresAt: now + 10}
			}
		}
		return s
	}
	with := func(s queue.State, h *queue.HoldState) queue.State { s.Hold = h; return s }
	free := waiting()
	listed := waiting() // a lock that keeps the list of t1, not in its line
	listed.Tickets = map[string]queue.TicketList{queue.WaiterIDOf(t1): {Locks: []string{"a", "b"}, ExpiresAt: now + 10}}

	for _, tt := range []struct {
		name      string
		prev, now []queue.State
		res       result
		violation string // "" when the states keep every invariant
	}{
		{name: "a ticket granted all its locks",
			prev: []queue.State{waiting(t1), waiting(t1), free},
			now:  []queue.State{with(free, held(t1, 7)), with(free, held(t1, 8)), free}},
		{name: "a ticket granted some of its locks",
			prev:      []queue.State{waiting(t1), waiting(t1), free},
			now:       []queue.State{with(free, held(t1, 7)), waiting(t1), free},
			violation: "was granted a but not b"},
		{name: "a ticket that holds and waits",
			prev:      []queue.State{waiting(t1), waiting(t1), free},
			now:       []queue.State{with(free, held(t1, 7)), with(free, held(t1, 8)), waiting(t1)},
			violation: "holds a and waits in the line of c"},
		{name: "a ticket that holds and keeps a list",
			prev:      []queue.State{with(free, held(t1, 7)), with(free, held(t1, 8)), free},
			now:       []queue.State{with(free, held(t1, 7)), with(free, held(t1, 8)), listed},
			violation: "holds a and c keeps its list"},
		{name: "a grant that passes a live waiter",
			prev:      []queue.State{waiting(single, t1), free, free},
			now:       []queue.State{with(waiting(single), held(t1, 7)), with(free, held(t1, 8)), free},
			violation: "passing",
		},
		{name: "two tickets in two orders",
			prev:      []queue.State{free, free, free},
			now:       []queue.State{waiting(t1, t2), waiting(t2, t1), free},
			violation: "stand in one order",
		},
		{name: "a free lock handed over, left to a live waiter of it alone",
			prev:      []queue.State{free, free, free},
			now:       []queue.State{free, waiting(single), free},
			res:       result{handed: []int{1}},
			violation: "b is free while",
		},
		{name: "a free lock headed by a ticket whose other lock is left to a live waiter",
			prev:      []queue.State{free, free, free},
			now:       []queue.State{waiting(t1), waiting(single, t1), free},
			res:       result{handed: []int{0}},
			violation: "a lock of the ticket",
		},
		{name: "the same, looked at by the waiting ticket, whose check stopped there",
			prev:      []queue.State{free, free, free},
			now:       []queue.State{waiting(t1), waiting(single, t1), free},
			res:       result{readied: []int{0, 1}, ticket: t1},
			violation: "where the ticket",
		},
		{name: "a free lock left to a live waiter after a held lock of the ticket, where its check stopped",
			prev:      []queue.State{free, free, free},
			now:       []queue.State{with(waiting(t1), held(holder, 7)), waiting(single, t1), free},
			res:       result{handed: []int{1}, readied: []int{0, 1}, ticket: t1},
			violation: "b is free while",
		},
		{name: "the same, where no script handed b over",
			prev: []queue.State{free, free, free},
			now:  []queue.State{with(waiting(t1), held(holder, 7)), waiting(single, t1), free},
			res:  result{readied: []int{0, 1}, ticket: t1},
		},
		{name: "a free lock left to a live waiter, which no script of the step looked at",
			prev: []queue.State{free, free, free},
			now:  []queue.State{free, waiting(single), free},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := checkSettled(tt.now, keys, tt.res)
			if err == nil {
				err = checkTickets(tt.prev, tt.now, keys, sets)
			}
			if tt.violation == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.violation)
		})
	}
}
