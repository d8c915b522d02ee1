package shrink

import "iter"

// Map is a map that gives back the memory of its largest size: once
// it holds a quarter of the most entries it held since it was last
// rebuilt, or fewer, a delete copies it into a map of its present size,
// and an empty Map holds no map at all. The zero value is an empty Map.
type Map[K comparable, V any] struct {
	m    map[K]V
	peak int // the most entries m has held
}

// Get returns the value of k, or the zero value when k is absent.
func (m *Map[K, V]) Get(k K) V { return m.m[k] }

// Lookup returns the value of k and whether k is present.
func (m *Map[K, V]) Lookup(k K) (V, bool) {
	v, ok := m.m[k]
	return v, ok
}

// Set sets the value of k.
func (m *Map[K, V]) Set(k K, v V) {
	if m.m == nil {
		m.m = make(map[K]V)
	}
	m.m[k] = v
	m.peak = max(m.peak, len(m.m))
}

// Delete removes k, if present, and rebuilds the map when it holds a
// quarter of its peak or fewer. While All runs, only the entry it is
// visiting may be deleted: a rebuild leaves All going over the entries
// of the map it started with.
func (m *Map[K, V]) Delete(k K) {
	if _, ok := m.m[k]; !ok {
		return
	}
	delete(m.m, k)
	switch n := len(m.m); {
	case n == 0:
		m.m, m.peak = nil, 0
	case m.peak >= floor && n <= m.peak/4:
		fresh := make(map[K]V, n)
		for k, v := range m.m {
			fresh[k] = v
		}
		m.m, m.peak = fresh, n
	}
}

// Len returns the number of entries.
func (m *Map[K, V]) Len() int { return len(m.m) }

// Peak returns the most entries the map held since it was last rebuilt:
// what its memory is sized for.
func (m *Map[K, V]) Peak() int { return m.peak }

// All returns an iterator over the entries, in no particular order.
func (m *Map[K, V]) All() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		for k, v := range m.m {
			if !yield(k, v) {
				return
			}
		}
	}
}
