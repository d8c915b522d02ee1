package queue

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/errs"
)

func TestLockOfKeepsOnlyHoldAndQueueKeys(t *testing.T) {
	k, err := For("p", "a:{b*")
	require.NoError(t, err)
	for key, want := range map[string]string{
		k.Lock:             "a:{b*",
		k.Queue:            "a:{b*",
		k.Deadline:         "",
		k.Token:            "",
		k.Call("0123abcd"): "",
		"p:{}":             "",
		"px:{a}":           "",
		"p:a":              "",
	} {
		name, ok := lockOf("p", key)
		assert.Equal(t, want != "", ok, key)
		assert.Equal(t, want, name, key)
	}
}

func TestLockOfKeepsAnElectionsHoldAndQueueKeys(t *testing.T) {
	k, err := Election("p", "jobs")
	require.NoError(t, err)
	for key, want := range map[string]string{
		k.Lock:     "jobs",
		k.Queue:    "jobs",
		k.Values:   "",
		k.Deadline: "",
		k.Joined:   "",
		k.Token:    "",
	} {
		name, ok := lockOf("p", key)
		assert.Equal(t, want != "", ok, key)
		assert.Equal(t, want, name, key)
	}
}

func TestListMatchEscapesThePrefixAndRefusesWhatNoNameMatches(t *testing.T) {
	for _, tt := range []struct{ prefix, pattern, want string }{
		{"p", "", "p:{*}*"},
		{"p", "*", "p:{*}*"},
		{"a*b?[c]\\", "x?", `a\*b\?\[c\]\\:{x?}*`},
		{"p", `a\\`, `p:{a\\}*`},
	} {
		got, err := listMatch(tt.prefix, tt.pattern)
		require.NoError(t, err, "%q %q", tt.prefix, tt.pattern)
		assert.Equal(t, tt.want, got)
	}
	for _, pattern := range []string{"a}", `a\`, `\\\`, "\xff"} {
		_, err := listMatch("p", pattern)
		assert.ErrorIs(t, err, errs.ErrInvalidName, "%q", pattern)
	}
	_, err := listMatch("p{", "*")
	assert.ErrorIs(t, err, errs.ErrInvalidPrefix)
}

func TestTagOfIsTheClientTagOfAnEntry(t *testing.T) {
	id := NewID()
	tag := NewTag()
	assert.Equal(t, tag, TagOf(Entry(id+tag, 0, "o")))
	assert.Empty(t, TagOf(Entry(id, 0, "o")), "an id without a tag")
	assert.Empty(t, TagOf("zzzzzzzzzzzzzzzzzzzzzzzz:1:o"), "not hex")
	assert.Empty(t, TagOf(""))
}
