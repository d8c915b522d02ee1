package main

import (
	"context"

	"github.com/fairlock/fairlock"
)

// forceWeighted removes the hold of owner on the Semaphore or the RWMutex
// st, whoever runs it, and grants the waiters that what it frees lets in;
// it reports whether a hold was removed.
func forceWeighted(ctx context.Context, fl *fairlock.Client, st fairlock.LockState, owner string) (bool, error) {
	if st.Kind == fairlock.KindRWMutex {
		return fl.RWMutex(st.Name).ForceRelease(ctx, owner)
	}
	return fl.Semaphore(st.Name, st.Capacity).ForceRelease(ctx, owner)
}
