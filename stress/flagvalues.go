package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The flag.Value types of the command's flags: -masters, and the ranges
// that -hold, -patience, -every and -names draw from.

// masterFlag is the flag.Value of -masters: a list of addresses, or a
// number of masters to start.
type masterFlag struct{ c *config }

var _ flag.Value = masterFlag{}

// String returns the addresses, or the number to start. The flag package
// may call it on a zero masterFlag.
func (m masterFlag) String() string {
	switch {
	case m.c == nil:
		return ""
	case m.c.StartMasters > 0:
		return strconv.Itoa(m.c.StartMasters)
	}
	return strings.Join(m.c.Masters, ",")
}

// Set parses a number from 1 to maxMasters, or host:port items split at
// commas (empty items skipped), each address once.
func (m masterFlag) Set(v string) error {
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
		if n < 1 || n > maxMasters {
			return fmt.Errorf("%d masters: want 1 to %d", n, maxMasters)
		}
		m.c.StartMasters, m.c.Masters = n, nil
		return nil
	}
	var l []string
	for _, a := range strings.Split(v, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("%q: want a number or host:port,host:port,...: %v", a, err)
		}
		if slices.Contains(l, a) {
			return fmt.Errorf("%s given twice", a)
		}
		l = append(l, a)
	}
	switch {
	case len(l) == 0:
		return fmt.Errorf("%q: no address", v)
	case len(l) > maxMasters:
		return fmt.Errorf("%d masters: want at most %d", len(l), maxMasters)
	}
	m.c.StartMasters, m.c.Masters = 0, l
	return nil
}

// span is a duration or a range of durations to draw from uniformly.
type span struct {
	Min time.Duration `json:"min"`
	Max time.Duration `json:"max"`
}

var _ flag.Value = (*span)(nil)

// String returns "D" or "MIN-MAX". The flag package may call it on a nil
// span.
func (s *span) String() string {
	switch {
	case s == nil:
		return "0s"
	case s.Min == s.Max:
		return s.Min.String()
	}
	return s.Min.String() + "-" + s.Max.String()
}

// Set parses "D", "MIN-MAX" or "MIN..MAX".
func (s *span) Set(v string) error {
	lo, hi, isRange := strings.Cut(v, "..")
	if !isRange {
		lo, hi, isRange = strings.Cut(v, "-")
	}
	a, err := time.ParseDuration(strings.TrimSpace(lo))
	if err != nil {
		return fmt.Errorf("want a duration, MIN-MAX or MIN..MAX: %v", err)
	}
	b := a
	if isRange {
		if b, err = time.ParseDuration(strings.TrimSpace(hi)); err != nil {
			return fmt.Errorf("want a duration, MIN-MAX or MIN..MAX: %v", err)
		}
	}
	if a < 0 || b < a {
		return fmt.Errorf("%q: want 0 <= MIN <= MAX", v)
	}
	*s = span{a, b}
	return nil
}

// draw returns a duration from s.
func (s span) draw(r *rand.Rand) time.Duration {
	if s.Max <= s.Min {
		return s.Min
	}
	return s.Min + time.Duration(r.Int64N(int64(s.Max-s.Min)+1))
}

// nameRange is how many names an attempt takes: a number, or a range to
// draw from uniformly.
type nameRange struct {
	Lo int `json:"lo"`
	Hi int `json:"hi"`
}

var _ flag.Value = (*nameRange)(nil)

// String returns "N" or "LO..HI". The flag package may call it on a nil
// nameRange.
func (r *nameRange) String() string {
	switch {
	case r == nil:
		return "0"
	case r.Lo == r.Hi:
		return strconv.Itoa(r.Lo)
	}
	return fmt.Sprintf("%d..%d", r.Lo, r.Hi)
}

// Set parses "N" or "LO..HI"; whether the numbers fit the run is left to
// config.validate.
func (r *nameRange) Set(v string) error {
	lo, hi, isRange := strings.Cut(v, "..")
	a, err := strconv.Atoi(strings.TrimSpace(lo))
	if err != nil {
		return fmt.Errorf("want a number or LO..HI: %v", err)
	}
	b := a
	if isRange {
		if b, err = strconv.Atoi(strings.TrimSpace(hi)); err != nil {
			return fmt.Errorf("want a number or LO..HI: %v", err)
		}
	}
	if b < a {
		return fmt.Errorf("%q: want LO <= HI", v)
	}
	*r = nameRange{a, b}
	return nil
}

// draw returns a number from r.
func (r nameRange) draw(rng *rand.Rand) int {
	if r.Hi <= r.Lo {
		return r.Lo
	}
	return r.Lo + rng.IntN(r.Hi-r.Lo+1)
}
