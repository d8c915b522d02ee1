package fair

import (
	"log/slog"
	"time"
)

// The engine's log records carry what its Config.Logger was built with
// (the root package gives it the Client's id and name) and, where they
// are known, these attributes, under these keys, in this order:
//
//	lock      the lock's name (a MultiLock's ticket: its names, joined with commas)
//	kind      what the lock is: one of the kinds below
//	owner     the owner id of the call or the hold
//	token     the hold's fencing token
//	held_for  how long the hold lasted: from its grant to its end, or to now while it lasts
//	waited    how long the Lock call has waited, from its start
//	err       what went wrong
//
// A quorum's master engines add master, the master's index. The records
// and the levels are listed in docs/operations.md ("Logs").

// The kinds of locks, as records name them.
const (
	kindMutex        = "mutex"
	kindMultiLock    = "multilock"
	kindSemaphore    = "semaphore"
	kindRWMutexRead  = "rwmutex_read"
	kindRWMutexWrite = "rwmutex_write"
	kindQuorumMutex  = "quorum_mutex"
	kindElection     = "election"
)

// weightedKind is the kind of a weighted lock's handle at level excl: a
// Semaphore's, or a RWMutex's reader's or writer's.
func weightedKind(w *Weights, excl bool) string {
	switch {
	case !w.rw:
		return kindSemaphore
	case excl:
		return kindRWMutexWrite
	}
	return kindRWMutexRead
}

// logLost logs at Error that a hold was lost: why says how it was found,
// err what failed (nil: nothing), attrs are the hold's (logAttrs). A lost
// hold is an error for its holder: it may have acted on the lock after
// another owner was granted it.
func logLost(log *slog.Logger, why string, err error, attrs []any) {
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	log.Error("fairlock: lease lost: "+why, attrs...)
}

// holdAttrs are the attributes of a record about a hold.
func holdAttrs(lock, kind, owner string, token int64, held time.Duration, more ...any) []any {
	return append([]any{
		slog.String("lock", lock),
		slog.String("kind", kind),
		slog.String("owner", owner),
		slog.Int64("token", token),
		slog.Duration("held_for", held),
	}, more...)
}

// logAttrs are the attributes of a record about h, followed by more.
func (h *Hold) logAttrs(more ...any) []any {
	return holdAttrs(h.l.keys.Name, h.l.kind, h.owner, h.token, h.heldFor(), more...)
}

// logAttrs are the attributes of a record about h, followed by more.
func (h *QHold) logAttrs(more ...any) []any {
	return holdAttrs(h.l.keys.Name, kindQuorumMutex, h.owner, h.eventToken(), h.heldFor(), more...)
}

// callAttrs are the attributes of a record about a Lock call of owner in
// the lock (or the locks) named lock, begun at start, followed by more.
func callAttrs(lock, kind, owner string, start time.Time, more ...any) []any {
	return append([]any{
		slog.String("lock", lock),
		slog.String("kind", kind),
		slog.String("owner", owner),
		slog.Duration("waited", time.Since(start)),
	}, more...)
}

// lineAttrs are callAttrs for a call in ln.
func lineAttrs[G any](ln line[G], owner string, start time.Time, more ...any) []any {
	return callAttrs(ln.name(), ln.lockKind(), owner, start, more...)
}

// lockAttrs are the attributes of a record about the lock l itself (no
// call, no hold), followed by more.
func (l *Mutex) lockAttrs(more ...any) []any {
	return append([]any{slog.String("lock", l.keys.Name), slog.String("kind", l.kind)}, more...)
}
