package main

import (
	"context"
	"fmt"

	"github.com/fairlock/fairlock"
)

// forceWeighted removes the hold of owner on the Semaphore or the RWMutex
// st, whoever runs it, and hands what it frees to the line; it reports
// whether a hold was removed.
//
// This version of the library has no forced release of one holder of a
// weighted lock (Semaphore.ForceRelease(ctx, owner), RWMutex.ForceUnlock(ctx,
// owner)): it returns an unsupportedError, and nothing is removed.
func forceWeighted(_ context.Context, _ *fairlock.Client, st fairlock.LockState, owner string) (bool, error) {
	method := "Semaphore.ForceRelease"
	if st.Kind == fairlock.KindRWMutex {
		method = "RWMutex.ForceUnlock"
	}
	return false, unsupportedError(fmt.Sprintf("removing the hold of owner %s from %s %q needs %s(ctx, owner), which this version of the fairlock library does not have: nothing was removed",
		owner, st.Kind, st.Name, method))
}

// unsupportedError is what this build of the command cannot do.
type unsupportedError string

func (e unsupportedError) Error() string { return string(e) }
