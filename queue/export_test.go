package queue

// Internals for the tests of package queue_test, which run the scripts
// (through package lua, which imports this one) against the model.

// TokensPerMs is tokensPerMs.
const TokensPerMs = tokensPerMs

// ExpireHold ends the hold as its key's expiry would, without moving the
// clock: what a test that deletes the key on a server tells the model.
func (m *Model) ExpireHold() { m.hold = nil }

// ParseEntry is parseEntry.
var ParseEntry = parseEntry

// IsTicket is isTicket.
var IsTicket = isTicket

// ParseWeighted is parseWeighted.
var ParseWeighted = parseWeighted

// QuorumFlaw is quorumFlaw: steps of the scripts a QuorumModel leaves out.
type QuorumFlaw = quorumFlaw

// The flaws.
const (
	FlawNoWriteBack       = flawNoWriteBack
	FlawNoCommitRaise     = flawNoCommitRaise
	FlawNoReleaseRaise    = flawNoReleaseRaise
	FlawHandOverWhileHeld = flawHandOverWhileHeld
)

// Break makes the model leave out the steps of flaws.
func (m *QuorumModel) Break(flaws QuorumFlaw) { m.flaws |= flaws }

// The keys of a quorum lock that expire, for Lapse.
const (
	LapseHold    = "hold"
	LapseCounter = "counter"
	LapseTicket  = "ticket"
	LapseGone    = "gone"
	LapseReceipt = "receipt"
)

// Lapse ends a key of the lock as its expiry would, without moving the
// clock: what a test that deletes the key on a server tells the model.
// what is one of the Lapse kinds; id names the tombstone (a waiter id) or
// the receipt (a call id).
func (m *QuorumModel) Lapse(what, id string) {
	switch what {
	case LapseHold:
		m.hold = nil
	case LapseCounter:
		m.token = counter{}
	case LapseTicket:
		m.ticket = counter{}
	case LapseGone:
		delete(m.gone, id)
	case LapseReceipt:
		delete(m.receipts, id)
	default:
		panic("queue: Lapse of " + what)
	}
}

// Leadership returns the entry of the hold and its value, when the hold
// has an owner and a value (a candidate's grant wrote one): what a run on
// several masters checks of each master's hold, without a copy of the
// whole state at every step.
func (m *QuorumModel) Leadership() (entry, value string, ok bool) {
	if m.hold == nil || m.hold.Owner == "" || !m.hold.HasValue {
		return "", "", false
	}
	return m.hold.Entry, m.hold.Value, true
}

// Places calls f with the entry of the hold (deadline 0), when it has an
// owner, and with each entry in line and its deadline: what a run on
// several masters watches to see a waiter lose its place, without a copy
// of the whole state at every step.
func (m *QuorumModel) Places(f func(entry string, deadline int64)) {
	if m.hold != nil && m.hold.Owner != "" {
		f(m.hold.Entry, 0)
	}
	for _, e := range m.queue {
		f(e, m.deadlines[e])
	}
}
