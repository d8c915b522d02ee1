package shrink

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A Map that held many keys and then lost all but a few is rebuilt
// to its present size along the way, and holds no map once empty.
func TestMapGivesBackTheRoomOfItsPeak(t *testing.T) {
	var m Map[int, string]
	const n = 200_000
	for i := range n {
		m.Set(i, "v")
	}
	require.Equal(t, n, m.Len())
	require.Equal(t, n, m.Peak())
	for i := range n - 10 {
		m.Delete(i)
	}
	require.Equal(t, 10, m.Len())
	require.LessOrEqual(t, m.Peak(), 4*floor, "rebuilt to about what it holds")
	for i := n - 10; i < n; i++ {
		v, ok := m.Lookup(i)
		require.True(t, ok)
		require.Equal(t, "v", v)
	}
	m.Delete(-1) // absent: nothing happens
	require.Equal(t, 10, m.Len())
	for i := n - 10; i < n; i++ {
		m.Delete(i)
	}
	require.Zero(t, m.Len())
	require.Zero(t, m.Peak())
	require.Nil(t, m.m, "an empty Map holds no map")
	require.Equal(t, "", m.Get(3))
}

// Deleting the entry All is visiting, rebuilds included, visits every
// entry once and leaves none.
func TestMapAllowsDeletingTheVisitedEntry(t *testing.T) {
	var m Map[int, int]
	for i := range 1000 {
		m.Set(i, i*2)
	}
	seen := map[int]bool{}
	for k, v := range m.All() {
		require.Equal(t, 2*k, v)
		require.False(t, seen[k])
		seen[k] = true
		m.Delete(k)
	}
	require.Len(t, seen, 1000)
	require.Zero(t, m.Len())
}

// A Queue is first in, first out across the ring's wrap, its growth and
// its shrinking; it keeps about four times what it holds at most, and
// nothing once empty.
func TestQueueIsFIFOAndGivesBackItsRoom(t *testing.T) {
	var q Queue[int]
	next, first := 0, 0
	push := func(k int) {
		for range k {
			q.Push(next)
			next++
		}
	}
	pop := func(k int) {
		for range k {
			require.Equal(t, first, q.Pop())
			first++
		}
	}
	push(10)
	pop(7) // the head moves: later pushes wrap around the ring
	push(100_000)
	require.Equal(t, 100_003, q.Len())
	for i := range q.Len() {
		require.Equal(t, first+i, q.At(i))
	}
	require.Equal(t, []int{first, first + 1}, q.AppendTo(nil)[:2])
	pop(100_000)
	require.Equal(t, 3, q.Len())
	require.LessOrEqual(t, q.Cap(), floor, "shrunk as it emptied")
	pop(3)
	require.Zero(t, q.Len())
	require.Zero(t, q.Cap())
	require.Nil(t, q.buf, "an empty Queue holds no ring")
	require.Panics(t, func() { q.Pop() })
	push(1)
	require.Panics(t, func() { q.At(1) })
	pop(1)
}

// Popping drops the ring's reference to the item, so that it can be
// collected while the queue lives on.
func TestQueueKeepsNoReferenceToWhatLeft(t *testing.T) {
	var q Queue[*int]
	for i := range 40 {
		q.Push(&i)
	}
	require.Equal(t, 64, q.Cap())
	require.NotNil(t, q.buf[0])
	q.Pop()
	require.Equal(t, 64, q.Cap(), "not shrunk: the same ring")
	require.Nil(t, q.buf[0], "the popped slot refers to nothing")
}
