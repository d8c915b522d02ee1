package main

import (
	"cmp"
	"container/heap"
	"slices"
	"time"

	"github.com/fairlock/fairlock/queue"
)

// scale is how the holds of one lock's line weigh against what the lock
// holds at once, as the library weighs them:
//   - a Mutex holds one hold at a time: capacity 1, every hold weighs 1;
//   - a Semaphore holds its permits: every hold weighs the permits it
//     asked for;
//   - a RWMutex holds any number of readers or one writer: capacity
//     queue.RWCapacity, a reader weighs 1, a writer all of it.
//
// Two holds whose weights add up to more than the capacity conflict: they
// cannot be held at once, and that alone orders them in time (see prior).
type scale struct {
	kind     string // "" (a Mutex, or a name of MultiLocks), runSemaphore or runRWMutex
	capacity int64
}

// scaleOf returns the scale of a line from its attempts, which all took
// one type of lock.
func scaleOf(as []*attempt) scale {
	if len(as) > 0 {
		switch a := as[0]; a.Type {
		case runSemaphore:
			return scale{kind: runSemaphore, capacity: max(a.Permits, 1)}
		case runRWMutex:
			return scale{kind: runRWMutex, capacity: queue.RWCapacity}
		}
	}
	return scale{capacity: 1}
}

// weight returns what hold a weighs at its grant.
func (s scale) weight(a *attempt) int64 {
	switch {
	case s.kind == runSemaphore:
		return max(a.Weight, 1)
	case s.kind == runRWMutex && a.Write:
		return s.capacity
	}
	return 1
}

// conflict reports whether holds of weights x and y cannot be held at
// once.
func (s scale) conflict(x, y int64) bool { return x+y > s.capacity }

// strict reports whether waiter w, ahead of grant g in line, must have
// been granted before g by token: always, except for two readers of a
// RWMutex, which may be granted together in one batch, their tokens in
// any order.
func (s scale) strict(w, g *attempt) bool {
	return s.kind != runRWMutex || w.Write || g.Write
}

// piece is a stretch of a hold: from its grant (before EventGranted) until
// end, it certainly held at least weight.
type piece struct {
	weight int64
	end    time.Time
}

// pieces returns what hold h certainly held: its weight until its certain
// end (certainEnd); for a RWMutex's writer that downgraded, all of it
// until it called the Unlock of its write level (the write level was
// released after that), and a reader's weight until its certain end.
func (s scale) pieces(h *attempt) []piece {
	end := certainEnd(h)
	if s.kind == runRWMutex && h.Write && !h.Downgrade.IsZero() && !h.LeaseLost {
		return []piece{{s.weight(h), h.Downgrade}, {1, end}}
	}
	return []piece{{s.weight(h), end}}
}

// heldAt returns the weight h certainly held just after t, by its pieces
// (0 once they have all ended).
func heldAt(ps []piece, t time.Time) int64 {
	var w int64
	for _, p := range ps {
		if p.end.After(t) {
			w = max(w, p.weight)
		}
	}
	return w
}

// change is one step of the weight certainly held on a line: hold h's
// weight changes by delta at at (up at its grant, down as its pieces end).
type change struct {
	at    time.Time
	delta int64
	h     *attempt
	rank  int // h's place in the line's grant order
}

// sweep walks the weight certainly held on a line over time, from its
// holds sorted by grant, and calls over at every grant after which more
// was held than the capacity, with the weight then held and the weight of
// each hold then certainly holding (h among them). A hold is certainly
// holding from its grant until the end of each piece; where a grant and
// an end fall on the same instant, the end counts first. It returns the
// most weight, and the most holds, certainly held at once.
func (s scale) sweep(holds []*attempt, over func(h *attempt, used int64, active map[*attempt]int64)) (most, mostHolds int64) {
	var changes []change
	for i, h := range holds {
		ps := s.pieces(h)
		cur := heldAt(ps, h.Granted)
		if cur == 0 {
			continue // nothing certain beyond the grant itself
		}
		changes = append(changes, change{h.Granted, cur, h, i})
		ends := make([]time.Time, 0, len(ps))
		for _, p := range ps {
			ends = append(ends, p.end)
		}
		slices.SortFunc(ends, time.Time.Compare)
		for _, e := range ends {
			if next := heldAt(ps, e); next != cur && e.After(h.Granted) {
				changes = append(changes, change{e, next - cur, h, i})
				cur = next
			}
		}
	}
	slices.SortFunc(changes, func(x, y change) int {
		return cmp.Or(x.at.Compare(y.at), cmp.Compare(sign(x.delta), sign(y.delta)), cmp.Compare(x.rank, y.rank))
	})
	active := map[*attempt]int64{}
	var used int64
	for _, ch := range changes {
		used += ch.delta
		active[ch.h] += ch.delta
		if active[ch.h] == 0 {
			delete(active, ch.h)
		}
		most, mostHolds = max(most, used), max(mostHolds, int64(len(active)))
		if ch.delta > 0 && ch.at.Equal(ch.h.Granted) && used > s.capacity && over != nil {
			over(ch.h, used, active)
		}
	}
	return most, mostHolds
}

func sign(x int64) int { return cmp.Compare(x, 0) }

// prior answers, while the holds of a line are visited in grant order,
// which holds visited before were certainly granted before the one
// visited now, h, because they conflict with it: a piece of hold x that
// conflicts with h and ended (its end) by h's EventGranted. Such a piece and
// h could not be held at once, and x held it at its EventGranted, not after
// h's; so h, which held at its own EventGranted and until after it, was
// granted after that piece was released, after its end. (A hold that
// overlapped x is reported by the sweep already and proves nothing of
// order.)
type prior struct {
	s       scale
	pending pieceHeap        // the pieces of the holds visited, by end
	done    map[int64]latest // the pieces that ended, by weight
}

// latest is what the ended pieces of one weight give: their latest end,
// and the hold with the highest token among them.
type latest struct {
	end time.Time
	top *attempt
}

func newPrior(s scale) *prior { return &prior{s: s, done: map[int64]latest{}} }

// visit moves to hold h: the pieces that ended by its EventGranted count.
func (p *prior) visit(h *attempt) {
	for len(p.pending) > 0 && !p.pending[0].end.After(h.Granted) {
		x := heap.Pop(&p.pending).(heldPiece)
		l := p.done[x.weight]
		if x.end.After(l.end) {
			l.end = x.end
		}
		if x.h.Token > 0 && (l.top == nil || x.h.Token > l.top.Token) {
			l.top = x.h
		}
		p.done[x.weight] = l
	}
}

// add counts hold h, visited now, for the holds after it.
func (p *prior) add(h *attempt) {
	for _, pc := range p.s.pieces(h) {
		if pc.end.After(h.Granted) {
			heap.Push(&p.pending, heldPiece{pc, h})
		}
	}
}

// before returns, of the holds certainly granted before h because they
// conflict with it, the latest end of a conflicting piece (zero when
// none) and the hold with the highest token (nil when none).
func (p *prior) before(h *attempt) (end time.Time, top *attempt) {
	w := p.s.weight(h)
	for weight, l := range p.done {
		if !p.s.conflict(weight, w) {
			continue
		}
		if l.end.After(end) {
			end = l.end
		}
		if l.top != nil && (top == nil || l.top.Token > top.Token) {
			top = l.top
		}
	}
	return end, top
}

// heldPiece is a piece of hold h.
type heldPiece struct {
	piece
	h *attempt
}

// pieceHeap is a min-heap of pieces by end.
type pieceHeap []heldPiece

func (q pieceHeap) Len() int           { return len(q) }
func (q pieceHeap) Less(i, j int) bool { return q[i].end.Before(q[j].end) }
func (q pieceHeap) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *pieceHeap) Push(x any)        { *q = append(*q, x.(heldPiece)) }
func (q *pieceHeap) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// notBefore returns a time before which hold h was certainly not yet
// granted: the latest of its call's start, the send of its last join and
// the send of its last poll that left it in line.
func notBefore(h *attempt) time.Time {
	t := h.Entered()
	if h.Polled.After(t) {
		t = h.Polled
	}
	return t
}
