package shrink

// Queue is a first-in, first-out queue in a ring that grows by doubling
// and, once it holds a quarter of its room or fewer, is copied into a ring
// of twice what it holds; an empty Queue holds no ring at all. The zero
// value is an empty Queue.
type Queue[T any] struct {
	buf  []T
	head int // index in buf of the oldest item
	n    int // items held
}

// Len returns the number of items.
func (q *Queue[T]) Len() int { return q.n }

// Cap returns the items the queue has room for before it grows: what its
// memory is sized for.
func (q *Queue[T]) Cap() int { return len(q.buf) }

// Push adds v as the newest item.
func (q *Queue[T]) Push(v T) {
	if q.n == len(q.buf) {
		q.resize(max(2*q.n, 16))
	}
	q.buf[(q.head+q.n)%len(q.buf)] = v
	q.n++
}

// At returns the i-th oldest item, 0 <= i < Len.
func (q *Queue[T]) At(i int) T {
	if i < 0 || i >= q.n {
		panic("shrink: Queue.At out of range")
	}
	return q.buf[(q.head+i)%len(q.buf)]
}

// Pop removes and returns the oldest item; Len must be above 0. It
// shrinks the ring when it holds a quarter of its room or fewer.
func (q *Queue[T]) Pop() T {
	if q.n == 0 {
		panic("shrink: Pop of an empty Queue")
	}
	var zero T
	v := q.buf[q.head]
	q.buf[q.head] = zero // the ring keeps no reference to what left it
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	switch {
	case q.n == 0:
		*q = Queue[T]{}
	case len(q.buf) >= floor && q.n <= len(q.buf)/4:
		q.resize(2 * q.n)
	}
	return v
}

// AppendTo appends the items to dst, oldest first, and returns it.
func (q *Queue[T]) AppendTo(dst []T) []T {
	for i := range q.n {
		dst = append(dst, q.buf[(q.head+i)%len(q.buf)])
	}
	return dst
}

// resize moves the items into a ring of size room >= n.
func (q *Queue[T]) resize(room int) {
	buf := make([]T, room)
	q.AppendTo(buf[:0])
	q.buf, q.head = buf, 0
}
