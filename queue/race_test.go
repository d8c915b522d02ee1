//go:build race

package queue_test

// The race detector slows the scripts' round trips several times over;
// the differential tests then make fewer calls per seed.
const raceEnabled = true
