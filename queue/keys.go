package queue

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fairlock/fairlock/internal/errs"
)

// Limits on the strings that become part of Redis keys and messages.
const (
	MaxNameLen   = 1024 // bytes in a lock name
	MaxPrefixLen = 256  // bytes in a key prefix
	MaxOwnerLen  = 256  // bytes in an owner id
	WaiterIDLen  = 16   // hex characters in a waiter id, before a Client's tag
	TagLen       = 8    // hex characters in a Client's tag

	// WakeVersion is the hex character that ends the waiter ids of this
	// package's Clients, after the tag: the wake format they read, in
	// which a hand-over's message carries its time (see Timed).
	WakeVersion = "1"
	// TicketVersion ends, in place of WakeVersion, the waiter id of a
	// MultiLock's ticket: one entry in the lines of several locks of one
	// server, granted all of them at once (see lua/lib.lua). Its
	// hand-overs are published as WakeVersion's are.
	TicketVersion = "2"
	// CandidateVersion ends, in place of WakeVersion, the waiter id of an
	// Election's candidate: a Mutex entry whose grant is a leadership,
	// which carries the value it campaigns with (see lua/lib.lua). Its
	// hand-overs are published as WakeVersion's are.
	CandidateVersion = "3"

	// MaxValueLen is the most bytes of an Election's value.
	MaxValueLen = 64 << 10
)

// LayoutVersion is the version of the layout of the keys this package
// writes (the keys of For, Weighted and Quorum, what each holds, and the
// waiter entries): the key LayoutKey of a prefix holds it, written by the
// first Client that uses the prefix, and a Client that finds another
// version there refuses the prefix (see "Keys" in docs/algorithm.md).
const LayoutVersion = "1"

// LayoutKey returns the key that holds the layout version of the keys
// under prefix.
func LayoutKey(prefix string) string { return prefix + ":layout" }

// Keys are the Redis keys and the pub/sub channel of one lock. Every key
// carries the hash tag {name}, so all of them live in one Redis Cluster
// slot and one script may touch them all.
type Keys struct {
	Name     string // the lock name
	Lock     string // P:{N}           hash: owner, count, token, entry, since
	Queue    string // P:{N}:queue     list of waiter entries, oldest first
	Deadline string // P:{N}:deadline  zset: entry -> poll-again deadline (ms)
	Joined   string // P:{N}:joined    zset: entry -> server time (ms) it joined the line
	Token    string // P:{N}:token     fencing counter
	Wake     string // P:{N}:wake      pub/sub channel of hand-overs
	call     string // P:{N}:call:     prefix of per-call receipts
	// Holders is the zset of a weighted lock's holders (owner id ->
	// the server time its lease ends); "" for a Mutex. A weighted lock's
	// other keys have the same roles as a Mutex's, under its own base
	// (see Weighted).
	Holders string
	// Ticket is a quorum lock's largest ticket written on a master (see
	// Quorum); "" for other locks.
	Ticket string
	// Values is an Election's hash of its candidates' values (entry ->
	// value), and Leader the pub/sub channel on which every change of its
	// leadership is told (see Election); "" for other locks.
	Values string
	Leader string
}

// Election returns the keys of the election of the name under prefix:
// the keys of For under the base P:{N}:e, so that an Election and a
// Mutex of one name are two locks, with Values and Leader besides. The
// errors are For's.
func Election(prefix, name string) (Keys, error) {
	k, err := For(prefix, name)
	if err != nil {
		return Keys{}, err
	}
	e := keysAt(name, k.Lock+":e")
	e.Values = e.Lock + ":values"
	e.Leader = e.Lock + ":leader"
	return e, nil
}

// LeaderMessage is what a script publishes on an Election's Leader
// channel at every change of its leadership (tell_leader in
// lua/lib.lua): a grant to a candidate, a new value (a proclaim), a
// leadership that ends with nobody to take it over. It carries nothing
// more; the observers read the hold when told.
const LeaderMessage = "leader"

// QuorumElection returns the keys that the election of the name under
// prefix has on each master of a quorum: the keys of Election under the
// base P:{N}:e:q, with Ticket as a quorum lock's.
func QuorumElection(prefix, name string) (Keys, error) {
	e, err := Election(prefix, name)
	if err != nil {
		return Keys{}, err
	}
	q := keysAt(name, e.Lock+":q")
	q.Ticket = q.Lock + ":ticket"
	q.Values = q.Lock + ":values"
	q.Leader = q.Lock + ":leader"
	return q, nil
}

// IsCandidate reports whether entry is an Election's candidate: its
// waiter id ends with CandidateVersion after the tag, and a ':' follows
// it (the rule of is_candidate in lua/lib.lua).
func IsCandidate(entry string) bool {
	id, _, found := strings.Cut(entry, ":")
	return found && len(id) == WaiterIDLen+TagLen+1 && id[len(id)-1:] == CandidateVersion && isHex(id)
}

// Quorum returns the keys that a quorum lock of the name under prefix
// has on each of its masters: the keys of For under the base P:{N}:q, so
// that a Mutex of one name on one of the masters is another lock, with
// Ticket besides. Its line is a zset ordered by ticket (see lua/lib.lua).
// The errors are For's.
func Quorum(prefix, name string) (Keys, error) {
	k, err := For(prefix, name)
	if err != nil {
		return Keys{}, err
	}
	q := keysAt(name, k.Lock+":q")
	q.Ticket = q.Lock + ":ticket"
	return q, nil
}

// TicketKey returns the key of the MultiLock ticket with waiter id id
// one of whose locks has the keys k: P:ticket:<waiter id>, under the
// prefix P of k, a list of the server time (ms) the ticket joined its
// lines, then the hash keys of its locks in key order (see lua/lib.lua).
// It carries no hash tag: a ticket is made only of locks of one server.
func (k Keys) TicketKey(id string) string {
	prefix, _, _ := strings.Cut(k.Lock, ":{")
	return prefix + ":ticket:" + id
}

// Gone returns the key of the tombstone of a quorum lock's Lock call with
// waiter id id (see lua/lib.lua).
func (k Keys) Gone(id string) string { return k.Lock + ":gone:" + id }

// Kinds of weighted locks, each under its own keys (see Weighted).
const (
	KindSemaphore = "sem"
	KindRWMutex   = "rw"
)

// RWCapacity is the capacity of a RWMutex as the scripts see it (a
// weighted lock; see lua/lib.lua): a reader weighs 1, a writer all of it.
const RWCapacity = 1 << 30

// Weighted returns the keys of the weighted lock (a Semaphore: kind
// KindSemaphore; a RWMutex: KindRWMutex) of the name under prefix: the
// keys of For under the base P:{N}:<kind>, so that a Mutex, a Semaphore
// and a RWMutex of one name are three locks, with Holders besides. The
// errors are For's.
func Weighted(prefix, name, kind string) (Keys, error) {
	k, err := For(prefix, name)
	if err != nil {
		return Keys{}, err
	}
	w := keysAt(name, k.Lock+":"+kind)
	w.Holders = w.Lock + ":holders"
	return w, nil
}

// For returns the keys of the lock name under prefix, or an error wrapping
// errs.ErrInvalidName or errs.ErrInvalidPrefix.
func For(prefix, name string) (Keys, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return Keys{}, err
	}
	if err := validateName(name); err != nil {
		return Keys{}, err
	}
	return keysAt(name, prefix+":{"+name+"}"), nil
}

// keysAt returns the keys of the lock name whose other keys are made from
// base, its first key.
func keysAt(name, base string) Keys {
	return Keys{
		Name:     name,
		Lock:     base,
		Queue:    base + ":queue",
		Deadline: base + ":deadline",
		Joined:   base + ":joined",
		Token:    base + ":token",
		Wake:     base + ":wake",
		call:     base + ":call:",
	}
}

// ClientWake returns the wake channel of the Client with tag: the lock's
// Wake channel followed by ":" and the tag. A hand-over to a waiter whose
// entry carries the tag is published there, so that only that Client
// receives it.
func (k Keys) ClientWake(tag string) string { return k.Wake + ":" + tag }

// WakeOf returns the channel a hand-over to entry is published on (the
// rule of wake_channel in lua/lib.lua): ClientWake of the tag that ends
// the entry's waiter id, or Wake for a waiter id without a tag.
func (k Keys) WakeOf(entry string) string {
	if tag := TagOf(entry); tag != "" {
		return k.ClientWake(tag)
	}
	return k.Wake
}

// Revoked returns the message a script publishes when it takes away the
// hold given to entry (a forced unlock; revoke in lua/lib.lua), on
// WakeOf(entry): "held:" and the entry. The holder's Client watches that
// id while it holds.
func Revoked(entry string) string { return revokedPrefix + entry }

const revokedPrefix = "held:"

// EntryOf returns the entry a wake message names: the one a grant ("<entry>
// <token>[ <time>]") or a tell ("<entry>") is for, or whose hold a
// revocation (Revoked) ends. The message goes out on WakeOf that entry.
func EntryOf(message string) string {
	entry, _, _ := strings.Cut(strings.TrimPrefix(message, revokedPrefix), " ")
	return entry
}

// WaiterIDOf returns the waiter id an entry made by Entry begins with:
// the id of the Lock call that made it.
func WaiterIDOf(entry string) string {
	id, _, _ := strings.Cut(entry, ":")
	return id
}

// TagOf returns the tag of the Client whose Lock call made entry: the
// TagLen hex characters after the first WaiterIDLen of its waiter id, or
// "" for a waiter id without a tag (or an entry that is not one).
func TagOf(entry string) string {
	id, _, found := strings.Cut(entry, ":")
	if found && (len(id) == WaiterIDLen+TagLen || len(id) == WaiterIDLen+TagLen+1) && isHex(id) {
		return id[WaiterIDLen : WaiterIDLen+TagLen]
	}
	return ""
}

// Timed reports whether a hand-over to entry is published with its time
// (the rule of wake_target in lua/lib.lua): "<entry> <token> <server time
// in µs>" when its waiter id ends with a wake format version after the
// tag, as the ids of this package's Clients do (WakeVersion); "<entry>
// <token>" otherwise, which is all that clients from before it read.
func Timed(entry string) bool {
	id, _, found := strings.Cut(entry, ":")
	return found && len(id) == WaiterIDLen+TagLen+1 && isHex(id)
}

func isHex(s string) bool {
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// Call returns the key of the receipt of one script call.
func (k Keys) Call(id string) string { return k.call + id }

// validateName reports whether name can name a lock. A name must be
// non-empty valid UTF-8 of at most MaxNameLen bytes without '}': a '}'
// would end the hash tag {name} early and could leave it empty, which
// would scatter the lock's keys over cluster slots.
func validateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", errs.ErrInvalidName)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: %d bytes, more than %d", errs.ErrInvalidName, len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: not valid UTF-8", errs.ErrInvalidName)
	case strings.ContainsRune(name, '}'):
		return fmt.Errorf("%w: %q contains '}'", errs.ErrInvalidName, name)
	}
	return nil
}

// ValidatePrefix reports whether prefix can prefix fairlock's keys: non-empty
// valid UTF-8 of at most MaxPrefixLen bytes without braces (a brace would
// change the hash tag of every key).
func ValidatePrefix(prefix string) error {
	switch {
	case prefix == "":
		return fmt.Errorf("%w: empty", errs.ErrInvalidPrefix)
	case len(prefix) > MaxPrefixLen:
		return fmt.Errorf("%w: %d bytes, more than %d", errs.ErrInvalidPrefix, len(prefix), MaxPrefixLen)
	case !utf8.ValidString(prefix):
		return fmt.Errorf("%w: not valid UTF-8", errs.ErrInvalidPrefix)
	case strings.ContainsAny(prefix, "{}"):
		return fmt.Errorf("%w: %q contains a brace", errs.ErrInvalidPrefix, prefix)
	}
	return nil
}

// ValidateOwner reports whether owner can identify a hold: non-empty valid
// UTF-8 of at most MaxOwnerLen bytes without spaces or control characters
// (owner ids travel inside pub/sub messages separated by spaces).
func ValidateOwner(owner string) error {
	switch {
	case owner == "":
		return fmt.Errorf("%w: empty", errs.ErrInvalidOwner)
	case len(owner) > MaxOwnerLen:
		return fmt.Errorf("%w: %d bytes, more than %d", errs.ErrInvalidOwner, len(owner), MaxOwnerLen)
	case !utf8.ValidString(owner):
		return fmt.Errorf("%w: not valid UTF-8", errs.ErrInvalidOwner)
	}
	for _, r := range owner {
		if r <= ' ' || r == 0x7f {
			return fmt.Errorf("%w: %q contains a space or control character", errs.ErrInvalidOwner, owner)
		}
	}
	return nil
}

// Entry returns the queue entry of one waiting Lock call:
// "<waiter id>:<lease ms>:<owner>". The waiter id (NewID, followed by the
// waiting Client's tag and WakeVersion) makes entries unique per call, so
// two calls that share an owner id still wait, and are woken, one by one;
// the tag names the channel the hand-over is published on (WakeOf), and
// the version what the message says (Timed). The lease is the one the
// hold gets when the lock is handed to this waiter.
func Entry(waiterID string, lease time.Duration, owner string) string {
	return waiterID + ":" + strconv.FormatInt(lease.Milliseconds(), 10) + ":" + owner
}

// WeightedEntry returns the entry of a weighted lock's waiter (see
// lua/lib.lua): "<waiter id>:<lease ms>:<weight><x|s>:<owner id>", x for
// a writer (exclusive).
func WeightedEntry(waiterID string, lease time.Duration, weight int64, excl bool, owner string) string {
	kind := "s"
	if excl {
		kind = "x"
	}
	return Entry(waiterID, lease, strconv.FormatInt(weight, 10)+kind+":"+owner)
}

// NewID returns a random id of WaiterIDLen hex characters: the first part
// of the waiter id of an Entry, or the id of a script call.
func NewID() string { return randomHex(WaiterIDLen) }

// NewTag returns a random Client tag of TagLen hex characters.
func NewTag() string { return randomHex(TagLen) }

// randomHex returns n (at most 16) random hex characters.
func randomHex(n int) string {
	const hex = "0123456789abcdef"
	var b [16]byte
	for i, r := 0, rand.Uint64(); i < n; i, r = i+1, r>>4 {
		b[i] = hex[r&15]
	}
	return string(b[:n])
}

// splitEntry splits a queue entry made by Entry; ok is false when entry is
// not of that form.
func splitEntry(entry string) (waiterID string, lease time.Duration, owner string, ok bool) {
	id, rest, found := strings.Cut(entry, ":")
	if !found || len(id) != WaiterIDLen && len(id) != WaiterIDLen+TagLen && len(id) != WaiterIDLen+TagLen+1 {
		return "", 0, "", false
	}
	ms, owner, found := strings.Cut(rest, ":")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !found || err != nil || n < 0 || owner == "" {
		return "", 0, "", false
	}
	return id, time.Duration(n) * time.Millisecond, owner, true
}
