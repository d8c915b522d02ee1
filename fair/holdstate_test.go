package fair

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/errs"
)

// What a hold registers with onEnd runs when the hold ends, in order, on
// the goroutine that ends it and after the hold's context is cancelled
// with its cause; registered after the end, it runs at once. It runs once
// however many times the hold is ended.
func TestOnEndRunsAtTheEndOnTheEndingGoroutine(t *testing.T) {
	var s holdState
	s.init(Request{Owner: "o"}, "e")
	var ran []string
	s.onEnd(func() {
		require.ErrorIs(t, context.Cause(s.Context()), errs.ErrLeaseLost, "the context is cancelled first")
		ran = append(ran, "first")
	})
	s.onEnd(func() { ran = append(ran, "second") })
	require.Empty(t, ran, "nothing runs while the hold lives")

	levels, ok := s.finish(errs.ErrLeaseLost, false, nil)
	require.True(t, ok)
	require.Equal(t, 1, levels)
	require.Equal(t, []string{"first", "second"}, ran, "run by finish itself, in order")

	_, ok = s.finish(errs.ErrClosed, false, nil)
	require.False(t, ok)
	require.Len(t, ran, 2, "a second end runs nothing again")

	s.onEnd(func() { ran = append(ran, "late") })
	require.Equal(t, []string{"first", "second", "late"}, ran, "registered after the end: run at once")
}
