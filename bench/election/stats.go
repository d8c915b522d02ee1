package main

import (
	"fmt"
	"slices"
	"time"
)

// summary is a distribution of durations, in milliseconds.
type summary struct {
	N      int     `json:"n"`
	Min    float64 `json:"min_ms"`
	Median float64 `json:"median_ms"`
	P90    float64 `json:"p90_ms"`
	P99    float64 `json:"p99_ms"`
	Max    float64 `json:"max_ms"`
}

// summarize returns the distribution of samples; nil for none.
func summarize(samples []time.Duration) *summary {
	if len(samples) == 0 {
		return nil
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	return &summary{
		N:      len(s),
		Min:    ms(s[0]),
		Median: ms(percentile(s, 50)),
		P90:    ms(percentile(s, 90)),
		P99:    ms(percentile(s, 99)),
		Max:    ms(s[len(s)-1]),
	}
}

// percentile returns the p-th percentile of sorted samples, by nearest
// rank: the smallest sample that at least p% of them do not exceed.
func percentile(sorted []time.Duration, p int) time.Duration {
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 × n)
	return sorted[max(rank, 1)-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// percentiles formats s as its median with p90 and p99, in one unit.
func (s *summary) percentiles() string {
	u := unitOf(s.Median)
	return fmt.Sprintf("%s (p90 %s, p99 %s)", u.format(s.Median, true), u.format(s.P90, false), u.format(s.P99, false))
}

// span formats s as its median with its smallest and largest samples.
func (s *summary) span() string {
	u := unitOf(s.Median)
	return fmt.Sprintf("%s (%s to %s)", u.format(s.Median, true), u.format(s.Min, false), u.format(s.Max, false))
}

// unit is a unit of time to print milliseconds in.
type unit struct {
	name string
	per  float64 // milliseconds per unit
}

// unitOf returns the unit to print a value of v milliseconds in: ms below
// a second, s from there.
func unitOf(v float64) unit {
	if v >= 1000 {
		return unit{"s", 1000}
	}
	return unit{"ms", 1}
}

// format prints v milliseconds in u, with three significant digits (at
// least two decimals of a second), and the unit's name when named.
func (u unit) format(v float64, named bool) string {
	x := v / u.per
	var s string
	switch a := abs(x); {
	case u.per == 1000 || a < 10:
		s = fmt.Sprintf("%.2f", x)
	case a < 100:
		s = fmt.Sprintf("%.1f", x)
	default:
		s = fmt.Sprintf("%.0f", x)
	}
	if named {
		s += " " + u.name
	}
	return s
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
