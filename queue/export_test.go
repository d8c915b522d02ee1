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
