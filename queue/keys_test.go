package queue

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/errs"
)

// clusterSlot computes the Redis Cluster slot of a key: CRC16 (XMODEM) of
// its hash tag, or of the whole key when it has no non-empty tag, mod 16384.
func clusterSlot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			key = key[open+1 : open+1+end]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

func TestClusterSlotMatchesRedis(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	assert.Equal(t, 12739, clusterSlot("123456789"))
	assert.Equal(t, clusterSlot("user1000"), clusterSlot("{user1000}.following"))
}

func TestNamesAreValidatedSoAllKeysShareOneSlot(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"orders:42", true},
		{"with space", true},
		{"new\nline", true},
		{"a{b", true},
		{"ünïcödé", true},
		{strings.Repeat("x", MaxNameLen), true},
		{"", false},
		{"a}b", false},
		{"}", false},
		{"{}", false},
		{string([]byte{0xff, 0xfe}), false},
		{strings.Repeat("x", MaxNameLen+1), false},
		{strings.Repeat("x", 1<<20), false},
	}
	for _, tt := range tests {
		k, err := For("fairlock", tt.name)
		if !tt.ok {
			require.ErrorIs(t, err, errs.ErrInvalidName, "%.40q", tt.name)
			continue
		}
		require.NoError(t, err, "%.40q", tt.name)
		want := clusterSlot(k.Lock)
		for _, key := range []string{k.Queue, k.Deadline, k.Token, k.Call("abc")} {
			assert.Equal(t, want, clusterSlot(key), "%q vs %q", key, k.Lock)
		}
	}
}

func TestPrefixesAreValidated(t *testing.T) {
	for _, p := range []string{"", "a{", "b}", string([]byte{0xff}), strings.Repeat("p", MaxPrefixLen+1)} {
		_, err := For(p, "name")
		require.ErrorIs(t, err, errs.ErrInvalidPrefix, "%q", p)
	}
	_, err := For("app:locks", "name")
	require.NoError(t, err)
}

func TestOwnersAreValidated(t *testing.T) {
	for _, o := range []string{"", "a b", "tab\t", "nl\n", string([]byte{0xff}), strings.Repeat("o", MaxOwnerLen+1)} {
		require.ErrorIs(t, ValidateOwner(o), errs.ErrInvalidOwner, "%q", o)
	}
	require.NoError(t, ValidateOwner("job-42:attempt/3"))
}

func TestEntriesRoundTrip(t *testing.T) {
	e := Entry("0123456789abcdef", 1500*time.Millisecond, "owner:with:colons")
	id, lease, owner, ok := splitEntry(e)
	require.True(t, ok)
	require.Equal(t, "0123456789abcdef", id)
	require.Equal(t, 1500*time.Millisecond, lease)
	require.Equal(t, "owner:with:colons", owner)
	for _, bad := range []string{"", "short:1:o", "0123456789abcdef:x:o", "0123456789abcdef:1:", "0123456789abcdef"} {
		_, _, _, ok := splitEntry(bad)
		require.False(t, ok, "%q", bad)
	}
}

func TestTaggedEntriesRoundTripAndNameTheirClientsChannel(t *testing.T) {
	k, err := For("p", "n")
	require.NoError(t, err)
	tag := NewTag()
	require.Len(t, tag, TagLen)
	id := NewID() + tag
	e := Entry(id, time.Second, "o")
	got, lease, owner, ok := splitEntry(e)
	require.True(t, ok)
	require.Equal(t, id, got)
	require.Equal(t, time.Second, lease)
	require.Equal(t, "o", owner)

	require.Equal(t, "p:{n}:wake:"+tag, k.ClientWake(tag))
	for entry, want := range map[string]string{
		e:                                   k.ClientWake(tag),
		"0123456789abcdef0A1b2C3d:1000:o":   k.ClientWake("0A1b2C3d"), // hex in either case
		"0123456789abcdef:1000:o":           k.Wake,                   // no tag: a client from before tags
		"0123456789abcdef0a1b2c3d1:1000:o":  k.ClientWake("0a1b2c3d"), // a wake format version after the tag
		"0123456789abcdef0a1b2c3d45:1000:o": k.Wake,                   // too long for a tag
		"0123456789abcdef0a1b2c3g:1000:o":   k.Wake,                   // not hex
		"0123456789abcdef0a1b2c3d":          k.Wake,                   // no lease or owner
	} {
		require.Equal(t, want, k.WakeOf(entry), "%q", entry)
	}
}

// Only an entry whose waiter id ends with a wake format version after the
// tag is sent the hand-over's time: clients from before it read
// "<entry> <token>" alone.
func TestOnlyEntriesWithAWakeVersionAreTimed(t *testing.T) {
	for entry, want := range map[string]bool{
		Entry(NewID()+NewTag()+WakeVersion, time.Second, "o"): true,
		"0123456789abcdef0a1b2c3dF:1000:o":                    true,
		Entry(NewID()+NewTag(), time.Second, "o"):             false, // tagged, from before the version
		"0123456789abcdef:1000:o":                             false, // no tag
		"0123456789abcdef0a1b2c3d45:1000:o":                   false, // too long
		"0123456789abcdef0a1b2c3g1:1000:o":                    false, // not hex
		"0123456789abcdef0a1b2c3d1":                           false, // no lease or owner
	} {
		require.Equal(t, want, Timed(entry), "%q", entry)
	}
	id := NewID() + NewTag() + WakeVersion
	got, _, _, ok := splitEntry(Entry(id, time.Second, "o"))
	require.True(t, ok)
	require.Equal(t, id, got)
}

// Only an entry whose waiter id ends with the candidate version after
// the tag is an Election's candidate, as lib.lua's is_candidate matches
// it.
func TestOnlyEntriesWithTheCandidateVersionAreCandidates(t *testing.T) {
	for entry, want := range map[string]bool{
		Entry(NewID()+NewTag()+CandidateVersion, time.Second, "o"): true,
		"0123456789ABCDEF0A1B2C3D3:1000:o":                         true, // hex in either case
		Entry(NewID()+NewTag()+WakeVersion, time.Second, "o"):      false,
		Entry(NewID()+NewTag()+TicketVersion, time.Second, "o"):    false,
		"0123456789abcdef0a1b2c33:1000:o":                          false, // a tag, no version
		"0123456789abcdef0a1b2c3d33:1000:o":                        false, // too long
		"0123456789abcdef0a1b2c3g3:1000:o":                         false, // not hex
		"0123456789abcdef0a1b2c3d3":                                false, // no lease or owner
	} {
		require.Equal(t, want, IsCandidate(entry), "%q", entry)
	}
}

func TestWaiterIDOfIsTheIDAnEntryBeginsWith(t *testing.T) {
	id := NewID() + NewTag()
	require.Equal(t, id, WaiterIDOf(Entry(id, 0, "owner:with:colons")))
	require.Equal(t, TagOf(Entry(id, 0, "o")), id[WaiterIDLen:])
}
