package fairlock

import "context"

// ForceResign ends the election's leadership, whoever holds it, and
// hands it to the next candidate in line, as Mutex.ForceUnlock removes a
// lock's hold: an operator's tool (fairlock unlock --force -kind
// election), not part of a protocol. It reports whether a leadership was
// ended. The former leader's Client is told at once, as a Mutex's holder
// is by ForceUnlock: the leadership's context is cancelled with
// ErrLeaseLost within a push's latency (about a second after the grant
// for a leadership younger than that), and in any case at its next
// renewal, should the push be lost. The election's observers are told
// the next leader, or that there is none. Until the former leader's
// context ends it may still act as the leader: a store that refuses
// writes of a term lower than the highest it has seen refuses its
// writes once the next leader's have reached it. When ctx ends before
// Redis answers, ForceResign returns ctx's error at once, and the
// leadership may still end once Redis answers: look with Leader.
func (e *Election) ForceResign(ctx context.Context) (bool, error) {
	if err := e.usable(ctx); err != nil {
		return false, err
	}
	return e.lock.ForceUnlock(ctx)
}
