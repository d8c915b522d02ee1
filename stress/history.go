package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// attemptKind says which call an attempt made.
type attemptKind string

// Kinds of attempts.
const (
	kindLock attemptKind = "lock" // Lock: waits in line
	kindTry  attemptKind = "try"  // TryLock: never waits
)

// outcome is how an attempt ended.
type outcome string

// Outcomes of attempts.
const (
	outGranted   outcome = "granted"    // the lock was granted, held and unlocked
	outGaveUp    outcome = "gave-up"    // the wait's context deadline passed first
	outTryFailed outcome = "try-failed" // TryLock found the lock taken
	outFailed    outcome = "error"      // Lock or TryLock failed otherwise
	outPending   outcome = "pending"    // still waiting, holding or unlocking when the run ended
)

// outcomes lists the outcomes in the order reports show them.
var outcomes = []outcome{outGranted, outGaveUp, outTryFailed, outFailed, outPending}

// join is one time a waiting Lock call appended its entry to the queue:
// the call was sent at Sent and answered at Answered, so the entry joined
// the line in between.
type join struct {
	Sent     time.Time `json:"sent"`
	Answered time.Time `json:"answered"`
}

// attempt is the history of one outer Lock or TryLock call, from the call
// to the end of its hold. Every time is the wall clock of the process that
// made the call, read on the caller's side, so each one brackets the real
// event: a grant happened before EventGranted, a release after UnlockStart.
type attempt struct {
	Worker string      `json:"worker"` // "p<process>/c<client>/g<goroutine>"
	Lock   string      `json:"lock"`   // a MultiLock's: its names joined by "+"
	Kind   attemptKind `json:"kind"`
	// Call is the id of the Lock or TryLock call, from the Observer: the
	// waiter id in its entry in Redis (the last, for a quorum Lock that
	// started over with a fresh entry).
	Call string `json:"call,omitempty"`

	// A MultiLock attempt's names, in the order it takes them (empty for
	// a Mutex attempt), what it did on each name, and the token of each
	// name that MultiLock.Token read once it was granted.
	Names  []string         `json:"names,omitempty"`
	Parts  []part           `json:"parts,omitempty"`
	Tokens map[string]int64 `json:"tokens,omitempty"`

	// What a Semaphore or RWMutex attempt took (all zero for a Mutex's
	// and a MultiLock's): the type of lock, runSemaphore or runRWMutex;
	// a Semaphore's capacity and the permits asked for; whether a
	// RWMutex's attempt took the write lock (else the read lock); and,
	// for a writer that downgraded, when it called the Unlock of its
	// write level, its read level going on until UnlockStart.
	Type      string    `json:"type,omitempty"`
	Permits   int64     `json:"permits,omitempty"`
	Weight    int64     `json:"weight,omitempty"`
	Write     bool      `json:"write,omitempty"`
	Downgrade time.Time `json:"downgrade,omitzero"`

	Start       time.Time `json:"start"`                 // Lock or TryLock called
	Began       time.Time `json:"began,omitzero"`        // the call reported WaitStarted: it had sent nothing yet
	Joins       []join    `json:"joins,omitempty"`       // appended to the queue; more than one: it lost its place
	Kept        time.Time `json:"kept,omitzero"`         // its place in line is certain until then (see keep)
	Polled      time.Time `json:"polled,omitzero"`       // sent its last poll that left it in line: not granted before then
	Deadline    time.Time `json:"deadline,omitzero"`     // the wait's context deadline (waiters that may give up)
	Granted     time.Time `json:"granted,omitzero"`      // Lock returned the hold
	Token       int64     `json:"token,omitempty"`       // fencing token of the hold
	Push        float64   `json:"push_ms,omitempty"`     // a pushed hand-over's latency, from the Observer (fairlock.Event.HandOver); 0: not known
	Depth       int       `json:"depth,omitempty"`       // nested Lock calls made with the held context
	Refused     int       `json:"refused,omitempty"`     // nested calls refused with ErrWouldDeadlock, as they must be
	UnlockStart time.Time `json:"unlock_start,omitzero"` // the outer Unlock called
	UnlockEnd   time.Time `json:"unlock_end,omitzero"`   // the outer Unlock returned
	Ended       time.Time `json:"ended,omitzero"`        // Lock returned an error (gave up, try failed, error)
	Outcome     outcome   `json:"outcome"`               // how it ended
	LeaseLost   bool      `json:"lease_lost,omitempty"`  // the hold's context ended with ErrLeaseLost
	Lost        time.Time `json:"lost,omitzero"`         // when the worker saw the lease lost: its context had ended by then
	Err         string    `json:"err,omitempty"`         // an unexpected error on the way

	// What an Election candidate's attempt did (Type runElection): the
	// value it campaigned with, the ID of its Client (as a Leadership
	// names it), the values it proclaimed while it led, in order, and
	// whether its Resign failed (the leadership then ended unseen).
	Value        string     `json:"value,omitempty"`
	Client       string     `json:"client,omitempty"`
	Proclaims    []proclaim `json:"proclaims,omitempty"`
	ResignFailed bool       `json:"resign_failed,omitempty"`
	// Leader and Proclaim calls made while leading that could not reach
	// Redis (a server down): nothing to judge.
	Unreached int `json:"unreached,omitempty"`
}

// proclaim is one change of a leader's value: Proclaim, or Campaign with
// the leadership's context (Campaign), called at Start and returned at
// End. Done, the change was made in Redis before End; failed (Err), it
// may have been made or not.
type proclaim struct {
	Value    string    `json:"value"`
	Campaign bool      `json:"campaign,omitempty"`
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	Err      string    `json:"err,omitempty"`
}

// watch is the record of one observer of an Election (the election
// kind): every view its Observe channel gave, with the time it was
// received.
type watch struct {
	Observer string    `json:"observer"` // "p<process>/c<client>/o<number>"
	Lock     string    `json:"lock"`     // the election's name
	Start    time.Time `json:"start"`    // Observe called
	// Settle is when the observer was told that every candidate of the
	// run had ended: from then on it waited for the final state (no
	// leader), and stopped at End. Settled: it saw it (a view without a
	// leader after Settle and -lag); Cut: it was stopped before (the run
	// was cut short, or attempts were left behind), and its last view
	// tells nothing.
	Settle  time.Time `json:"settle,omitzero"`
	End     time.Time `json:"end"`
	Settled bool      `json:"settled,omitempty"`
	Cut     bool      `json:"cut,omitempty"`
	Views   []view    `json:"views"`
	Err     string    `json:"err,omitempty"` // Observe failed, or its channel closed early
}

// view is one Leadership an observer received, at At: Term 0 when the
// election had no leader.
type view struct {
	Term   int64     `json:"term,omitempty"`
	Value  string    `json:"value,omitempty"`
	Client string    `json:"client,omitempty"`
	At     time.Time `json:"at"`
}

// keep records one answered poll that left the waiter in line. Each poll
// moved the waiter's deadline to ttl after it ran, so the place is certain
// until ttl after the send of the last poll, as long as every poll was
// answered before the deadline the one before it had set; after a poll
// that came later than that, the waiter may have been dropped in between
// (and, finding the line empty, granted without joining again), so Kept
// stops growing there.
func (a *attempt) keep(sent, answered time.Time, ttl time.Duration, broken *bool) {
	keep(&a.Kept, sent, answered, ttl, broken)
}

// keep moves kept, the end of a waiter's certain place, for one answered
// poll: see attempt.keep.
func keep(kept *time.Time, sent, answered time.Time, ttl time.Duration, broken *bool) {
	switch {
	case *broken:
	case kept.IsZero() || answered.Before(*kept):
		*kept = sent.Add(ttl)
	default:
		*broken = true
	}
}

// multi reports whether the attempt was a MultiLock's.
func (a *attempt) multi() bool { return len(a.Names) > 0 }

// Held reports whether the attempt was granted the lock.
func (a *attempt) Held() bool { return !a.Granted.IsZero() }

// Entered returns when the attempt took its place: the send time of its
// last join, or its start when it never joined the queue (granted at once,
// or a TryLock).
func (a *attempt) Entered() time.Time {
	if n := len(a.Joins); n > 0 {
		return a.Joins[n-1].Sent
	}
	return a.Start
}

// firstSet returns the first of ts that is not zero.
func firstSet(ts ...time.Time) time.Time {
	for _, t := range ts {
		if !t.IsZero() {
			return t
		}
	}
	return time.Time{}
}

// A recorder receives finished attempts, and the records of the
// observers of the election kind. Implementations are safe for
// concurrent use.
type recorder interface {
	Record(attempt)
	RecordWatch(watch)
}

// history keeps attempts in memory and counts them by outcome. It is safe
// for concurrent use.
type history struct {
	mu       sync.Mutex
	attempts []attempt // guarded by mu
	watches  []watch   // guarded by mu
	counts   sync.Map  // outcome -> *atomic.Int64
	// The verdicts an attempt gives on its own: it saw an unexpected
	// error, or lost its lease.
	errs, leases atomic.Int64
}

var _ recorder = (*history)(nil)

// Record adds a to the history.
func (h *history) Record(a attempt) {
	h.mu.Lock()
	h.attempts = append(h.attempts, a)
	h.mu.Unlock()
	c, _ := h.counts.LoadOrStore(a.Outcome, new(atomic.Int64))
	c.(*atomic.Int64).Add(1)
	if a.Err != "" {
		h.errs.Add(1)
	}
	if a.LeaseLost {
		h.leases.Add(1)
	}
}

// RecordWatch adds an observer's record to the history.
func (h *history) RecordWatch(w watch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.watches = append(h.watches, w)
}

// Watches returns a copy of the observers' records.
func (h *history) Watches() []watch {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.watches)
}

// Attempts returns a copy of the attempts recorded so far.
func (h *history) Attempts() []attempt {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.attempts)
}

// Count returns how many attempts ended with o so far.
func (h *history) Count(o outcome) int64 {
	if c, ok := h.counts.Load(o); ok {
		return c.(*atomic.Int64).Load()
	}
	return 0
}

// line is one JSON line of a worker process's output.
type line struct {
	Attempt *attempt `json:"attempt,omitempty"`
	Watch   *watch   `json:"watch,omitempty"`
	// Idle: every worker of the process is done, and its observers wait
	// for the parent's word that every process is (see runProcs).
	Idle  bool   `json:"idle,omitempty"`
	Done  bool   `json:"done,omitempty"`  // last line of a worker process that finished its run
	Error string `json:"error,omitempty"` // last line of a worker process that could not run
}

// stream writes attempts as JSON lines: how a worker process hands its
// history to the parent. It is safe for concurrent use.
type stream struct {
	mu  sync.Mutex
	enc *json.Encoder // guarded by mu
	err error         // first write error; guarded by mu
}

var _ recorder = (*stream)(nil)

func newStream(w io.Writer) *stream { return &stream{enc: json.NewEncoder(w)} }

// Record writes one attempt.
func (s *stream) Record(a attempt) { s.write(line{Attempt: &a}) }

// RecordWatch writes one observer's record.
func (s *stream) RecordWatch(w watch) { s.write(line{Watch: &w}) }

// idle tells the parent that the process's workers are all done.
func (s *stream) idle() { s.write(line{Idle: true}) }

// finish writes the last line: done, or the error that stopped the worker
// process. It returns the first write error.
func (s *stream) finish(runErr error) error {
	if runErr != nil {
		s.write(line{Error: runErr.Error()})
	} else {
		s.write(line{Done: true})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *stream) write(l line) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = s.enc.Encode(l)
	}
}

// readStream records the attempts and observers' records a worker
// process wrote to r, and calls idle when it says its workers are done.
// It returns when r ends, with done set when the process wrote its done
// line, and the error the process reported or the stream's own.
func readStream(r io.Reader, rec recorder, idle func()) (done bool, err error) {
	dec := json.NewDecoder(r)
	for {
		var l line
		switch err := dec.Decode(&l); {
		case err == io.EOF:
			return done, nil
		case err != nil:
			return done, fmt.Errorf("reading a worker process's history: %w", err)
		}
		switch {
		case l.Attempt != nil:
			rec.Record(*l.Attempt)
		case l.Watch != nil:
			rec.RecordWatch(*l.Watch)
		case l.Idle:
			idle()
		case l.Error != "":
			return false, errors.New(l.Error)
		case l.Done:
			done = true
		}
	}
}

// writeHistoryFile writes the attempts to the file path as JSON lines,
// sorted by start, and then the observers' records (the election kind),
// one line each, sorted by observer.
func writeHistoryFile(path string, attempts []attempt, watches []watch) error {
	sorted := slices.Clone(attempts)
	slices.SortStableFunc(sorted, func(a, b attempt) int { return a.Start.Compare(b.Start) })
	ws := slices.Clone(watches)
	slices.SortStableFunc(ws, func(a, b watch) int { return strings.Compare(a.Observer, b.Observer) })
	return writeFile(path, "history", func(w io.Writer) error {
		enc := json.NewEncoder(w)
		for i := range sorted {
			if err := enc.Encode(&sorted[i]); err != nil {
				return err
			}
		}
		for i := range ws {
			if err := enc.Encode(&ws[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// writeFile creates the file path and writes it through a buffer with
// write; errors, of the writing, the flush or the close, are prefixed with
// what.
func writeFile(path, what string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	w := bufio.NewWriter(f)
	err = write(w)
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
