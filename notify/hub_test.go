package notify

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPublishRightAfterWatchReturnsIsDelivered(t *testing.T) {
	srv := redistest.Shared(t)
	h := newHub(t, srv.Client(t), Options{})
	pub := srv.Client(t)
	prefix := redistest.Prefix(t)

	for i := range 200 {
		channel := fmt.Sprintf("%s:%d", prefix, i)
		w := watch(t, h, channel, "w")
		require.EqualValues(t, 1, publish(t, pub, channel, "w 7"),
			"iteration %d: PUBLISH right after Watch found no subscriber", i)
		requireSignal(t, w, "grant published after Watch returned")
		token, ok := w.Grant()
		require.True(t, ok)
		require.EqualValues(t, 7, token)
		w.Stop()
	}
}

// A grant message that carries the server's time of the hand-over hands
// it to the waiter with the time this process heard it; one without a
// time reports 0, as before any grant.
func TestAGrantsServerTimeIsKeptWithWhenItWasHeard(t *testing.T) {
	srv := redistest.Shared(t)
	h := newHub(t, srv.Client(t), Options{})
	pub := srv.Client(t)
	channel := redistest.Prefix(t) + ":ch"
	w := watch(t, h, channel, "w")
	at, heard := w.GrantTime()
	require.Zero(t, at)
	require.True(t, heard.IsZero(), "before any grant")

	before := time.Now()
	publish(t, pub, channel, "w 7 1764083400123456")
	requireSignal(t, w, "timed grant")
	token, ok := w.Grant()
	require.True(t, ok)
	require.EqualValues(t, 7, token)
	at, heard = w.GrantTime()
	require.EqualValues(t, 1764083400123456, at)
	require.False(t, heard.Before(before), "heard after it was published")
	require.False(t, heard.After(time.Now()))

	publish(t, pub, channel, "w 8")
	requireSignal(t, w, "grant without a time")
	at, _ = w.GrantTime()
	require.Zero(t, at, "the latest grant carried no time")
}

func TestEveryConcurrentWatcherOfANewChannelReturnsSubscribed(t *testing.T) {
	srv := redistest.Shared(t)
	h := newHub(t, srv.Client(t), Options{})
	pub := srv.Client(t)
	prefix := redistest.Prefix(t)

	for i := range 50 {
		channel := fmt.Sprintf("%s:%d", prefix, i)
		var wg sync.WaitGroup
		for j := range 4 {
			wg.Go(func() {
				// Not the test goroutine: report with assert, never require.
				ctx, cancel := context.WithTimeout(context.Background(), patience)
				defer cancel()
				id := fmt.Sprintf("w%d", j)
				w, err := h.Watch(ctx, channel, id)
				if !assert.NoError(t, err) {
					return
				}
				defer w.Stop()
				n, err := pub.Publish(ctx, channel, id).Result()
				assert.NoError(t, err)
				assert.GreaterOrEqual(t, n, int64(1),
					"iteration %d: PUBLISH right after Watch found no subscriber", i)
				select {
				case <-w.C():
				case <-ctx.Done():
					assert.Fail(t, "no signal", "waiter %s of iteration %d", id, i)
				}
			})
		}
		wg.Wait()
	}
}

func TestWatchAfterLastStopIsNotConfirmedByTheOldSubscription(t *testing.T) {
	srv := redistest.Shared(t)
	h := newHub(t, srv.Client(t), Options{})
	pub := srv.Client(t)
	channel := redistest.Prefix(t)

	for i := range 200 {
		old := watch(t, h, channel, "old")
		old.Stop() // queues UNSUBSCRIBE
		w := watch(t, h, channel, "new")
		require.EqualValues(t, 1, publish(t, pub, channel, "new"),
			"iteration %d: channel not subscribed after Stop then Watch", i)
		requireSignal(t, w, "wake published after the re-Watch returned")
		w.Stop()
	}
}

func TestMessagesReachOnlyTheWaiterTheyName(t *testing.T) {
	srv := redistest.Shared(t)
	h := newHub(t, srv.Client(t), Options{})
	pub := srv.Client(t)
	channel := redistest.Prefix(t)
	a := watch(t, h, channel, "a")
	b := watch(t, h, channel, "b")
	// The reader handles messages in order, so once the sentinel has been
	// signalled, everything published before it has been handled.
	sentinel := watch(t, h, channel, "sentinel")
	settle := func() {
		t.Helper()
		publish(t, pub, channel, "sentinel")
		requireSignal(t, sentinel, "sentinel wake")
	}

	publish(t, pub, channel, "a 42")
	requireSignal(t, a, "grant for a")
	token, ok := a.Grant()
	require.True(t, ok)
	require.EqualValues(t, 42, token)
	settle()
	requireNoSignal(t, b, "grant was for a")
	_, ok = b.Grant()
	require.False(t, ok)

	publish(t, pub, channel, "b")
	requireSignal(t, b, "plain wake for b")
	_, ok = b.Grant()
	require.False(t, ok, "a plain wake is not a grant")
	settle()
	requireNoSignal(t, a, "wake was for b")

	for _, payload := range []string{"stranger 9", "stranger", "", " 5", "a notanumber", "a 1 x", "a 1 2 3", "a 99999999999999999999", "a "} {
		publish(t, pub, channel, payload)
	}
	settle()
	requireNoSignal(t, a, "unknown ids and malformed payloads are ignored")
	requireNoSignal(t, b, "unknown ids and malformed payloads are ignored")
	token, ok = a.Grant()
	require.True(t, ok, "a grant is sticky")
	require.EqualValues(t, 42, token, "malformed grants leave the token alone")
}

func TestGrantIsVisibleOnceTheSignalIsReceived(t *testing.T) {
	srv := redistest.Shared(t)
	h := newHub(t, srv.Client(t), Options{})
	pub := srv.Client(t)
	prefix := redistest.Prefix(t)

	for i := range 100 {
		w := watch(t, h, fmt.Sprintf("%s:%d", prefix, i), "w")
		publish(t, pub, w.channel, fmt.Sprintf("w %d", i))
		requireSignal(t, w, "grant")
		token, ok := w.Grant()
		require.True(t, ok, "iteration %d", i)
		require.EqualValues(t, i, token)
		w.Stop()
	}
}

func TestAllWaitersShareOneConnectionAndOneSubscriptionPerChannel(t *testing.T) {
	srv := redistest.Shared(t)
	name := strings.ReplaceAll(redistest.Prefix(t), "-", "_")
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ClientName: name})
	t.Cleanup(func() { _ = rdb.Close() })
	h := newHub(t, rdb, Options{})
	admin := srv.Client(t)

	channels := make([]string, 20)
	for i := range channels {
		channels[i] = fmt.Sprintf("%s:%d", name, i)
	}
	var waiters []*Waiter
	for i := range 50 {
		waiters = append(waiters, watch(t, h, channels[i%len(channels)], fmt.Sprintf("w%d", i)))
	}

	list, err := admin.Do(t.Context(), "CLIENT", "LIST", "TYPE", "pubsub").Text()
	require.NoError(t, err)
	conns := 0
	for line := range strings.Lines(list) {
		if strings.Contains(line, " name="+name+" ") {
			conns++
		}
	}
	require.Equal(t, 1, conns, "pub/sub connections of the hub:\n%s", list)
	for channel, n := range numSub(t, admin, channels...) {
		require.EqualValues(t, 1, n, "subscriptions of %s", channel)
	}

	for _, w := range waiters {
		w.Stop()
	}
	require.Empty(t, watched(h))
	require.Eventually(t, func() bool {
		for _, n := range numSub(t, admin, channels...) {
			if n != 0 {
				return false
			}
		}
		return true
	}, patience, 10*time.Millisecond, "channels still subscribed after every waiter stopped")
}

func TestParsePayload(t *testing.T) {
	tests := []struct {
		payload string
		want    message
		bad     bool
	}{
		{payload: "w1 42", want: message{id: "w1", token: 42, grant: true}},
		{payload: "w1 -3", want: message{id: "w1", token: -3, grant: true}},
		{payload: "w1 9223372036854775807", want: message{id: "w1", token: 9223372036854775807, grant: true}},
		{payload: "w1 42 1764083400123456", want: message{id: "w1", token: 42, grant: true, at: 1764083400123456}},
		{payload: "w1", want: message{id: "w1"}},
		{payload: "w1 42,7,1800000000000123 1764083400123456", want: message{id: "w1", token: 42, tokens: []int64{42, 7, 1800000000000123}, grant: true, at: 1764083400123456}},
		{payload: "w1 42,7", want: message{id: "w1", token: 42, tokens: []int64{42, 7}, grant: true}},
		{payload: "", bad: true},
		{payload: " 42", bad: true},
		{payload: "w1 ", bad: true},
		{payload: "w1 x", bad: true},
		{payload: "w1 1 ", bad: true},
		{payload: "w1 1 x", bad: true},
		{payload: "w1 1 0", bad: true},
		{payload: "w1 1 2 3", bad: true},
		{payload: "w1 1, 2", bad: true},
		{payload: "w1 1,,2 3", bad: true},
		{payload: "w1 ,1 3", bad: true},
		{payload: "w1 1,x 3", bad: true},
		{payload: "w1 9223372036854775808", bad: true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.payload), func(t *testing.T) {
			m, err := parsePayload(tt.payload)
			if tt.bad {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, m)
		})
	}
}

// Subscribed tells, without a round trip, whether a Watch of the channel
// would find its subscription confirmed: only between the first Watch's
// return and the last waiter's Stop, and never after Close.
func TestSubscribedIsTrueExactlyWhileAConfirmedSubscriptionHasWaiters(t *testing.T) {
	srv := redistest.Shared(t)
	h := newHub(t, srv.Client(t), Options{})
	channel := redistest.Prefix(t) + ":ch"
	require.False(t, h.Subscribed(channel), "before any Watch")
	a := watch(t, h, channel, "a")
	require.True(t, h.Subscribed(channel), "once Watch returned")
	b := watch(t, h, channel, "b")
	a.Stop()
	require.True(t, h.Subscribed(channel), "while a waiter is left")
	b.Stop()
	require.False(t, h.Subscribed(channel), "after the last waiter's Stop")
	watch(t, h, channel, "c")
	require.True(t, h.Subscribed(channel))
	require.NoError(t, h.Close())
	require.False(t, h.Subscribed(channel), "after Close")
}

// With Options.Linger, a channel whose last waiter stopped stays
// subscribed for the linger: a Watch meanwhile finds it confirmed and
// hears what is published at once. Then it is unsubscribed on the server.
func TestALingeringChannelStaysSubscribedUntilItsLingerEnds(t *testing.T) {
	srv := redistest.Shared(t)
	h := newHub(t, srv.Client(t), Options{Linger: 300 * time.Millisecond})
	pub := srv.Client(t)
	channel := redistest.Prefix(t) + ":ch"
	numsub := func() int64 {
		n, err := pub.PubSubNumSub(context.Background(), channel).Result()
		require.NoError(t, err)
		return n[channel]
	}

	watch(t, h, channel, "a").Stop()
	require.True(t, h.Subscribed(channel), "lingering after the last Stop")
	require.EqualValues(t, 1, numsub())
	b := watch(t, h, channel, "b")
	require.EqualValues(t, 1, publish(t, pub, channel, "b 5"))
	requireSignal(t, b, "grant published on the lingering subscription")
	b.Stop()
	require.True(t, h.Subscribed(channel), "lingering again after b's Stop")

	require.Eventually(t, func() bool { return !h.Subscribed(channel) && numsub() == 0 },
		patience, 10*time.Millisecond, "unsubscribed once the linger ended")
}

// The hub keeps no room for channels nobody watches any more: after a
// thousand channels each watched and left (a lingering one dropped when
// its linger ends), its map of channels holds room for about what is left,
// and none once every channel left, where Go's own map would keep the room
// of a thousand; a channel that had a thousand waiters and keeps one holds
// room for about that one.
func TestTheHubGivesBackTheRoomOfChannelsAndWaitersThatLeft(t *testing.T) {
	srv := redistest.Shared(t)
	h := newHub(t, srv.Client(t), Options{Linger: 50 * time.Millisecond})
	prefix := redistest.Prefix(t)
	const n = 1000
	var waiters []*Waiter
	for i := range n {
		waiters = append(waiters, watch(t, h, fmt.Sprintf("%s:%d", prefix, i), "w"))
	}
	hot := prefix + ":hot"
	for i := range n {
		waiters = append(waiters, watch(t, h, hot, fmt.Sprintf("w%d", i)))
	}
	stay := watch(t, h, hot, "stays")
	// room returns the channels and the room of the map of channels, and
	// the waiters and room of the hot channel's map of waiters.
	room := func() (channels, channelsRoom, hotWaiters, hotRoom int) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if ht := h.topics.Get(hot); ht != nil {
			hotWaiters, hotRoom = ht.waiters.Len(), ht.waiters.Peak()
		}
		return h.topics.Len(), h.topics.Peak(), hotWaiters, hotRoom
	}
	channels, _, hotWaiters, _ := room()
	require.Equal(t, n+1, channels)
	require.Equal(t, n+1, hotWaiters)

	for _, w := range waiters {
		w.Stop()
	}
	require.Eventually(t, func() bool {
		channels, _, _, _ := room()
		return channels == 1
	}, patience, 10*time.Millisecond, "the channels left once their linger ended")
	channels, channelsRoom, hotWaiters, hotRoom := room()
	require.Equal(t, 1, channels)
	require.LessOrEqual(t, channelsRoom, 64, "the map of channels was rebuilt for what it holds")
	require.Equal(t, 1, hotWaiters)
	require.LessOrEqual(t, hotRoom, 64, "the hot channel's map of waiters too")

	stay.Stop()
	require.Eventually(t, func() bool {
		channels, channelsRoom, _, _ := room()
		return channels == 0 && channelsRoom == 0
	}, patience, 10*time.Millisecond, "no room at all once every channel left")
}
