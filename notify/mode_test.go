package notify

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
)

func TestModeIsAskedAgainUntilItAnswers(t *testing.T) {
	srv := redistest.Shared(t)
	var calls atomic.Int32
	h := newHub(t, srv.Client(t), Options{Mode: func(context.Context) (Mode, error) {
		if calls.Add(1) < 3 {
			return Classic, errors.New("server unreachable")
		}
		return Classic, nil
	}})
	channel := redistest.Prefix(t)
	w := watch(t, h, channel, "w")
	require.EqualValues(t, 3, calls.Load())
	requireDelivered(t, srv.Client(t), w)

	watch(t, h, channel+":other", "w")
	require.EqualValues(t, 3, calls.Load(), "the mode, once known, is kept")
}

func TestWatchGivesUpAskingForTheModeWhenItsContextEnds(t *testing.T) {
	h := newHub(t, redistest.Shared(t).Client(t), Options{Mode: func(context.Context) (Mode, error) {
		return Classic, errors.New("server unreachable")
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := h.Watch(ctx, redistest.Prefix(t), "w")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "server unreachable")
}

func TestShardedModeNeedsAClusterClient(t *testing.T) {
	h := newHub(t, redistest.Shared(t).Client(t), Options{Mode: func(context.Context) (Mode, error) {
		return Sharded, nil
	}})
	_, err := h.Watch(t.Context(), redistest.Prefix(t), "w")
	require.ErrorContains(t, err, "need a Redis Cluster client")
}
