package main

import (
	"cmp"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Timeline geometry, in pixels.
const (
	svgLeft   = 150   // worker labels
	svgRight  = 20    //
	svgPlot   = 1400  // width of the time axis
	svgTop    = 74    // title, legend and axis above the rows
	svgRow    = 14    // height of one worker's row
	svgBar    = 10    // height of a hold
	svgBottom = 20    //
	svgMaxV   = 100   // violation markers drawn at most
	svgWaits  = 20000 // above this many attempts, waits are not drawn
)

// writeSVGFile draws the timeline into the file path.
func writeSVGFile(path string, attempts []attempt, locks []string, vs []violation) error {
	return writeFile(path, "svg", func(w io.Writer) error { return writeSVG(w, attempts, locks, vs) })
}

// writeSVG draws the run as a timeline: one row per worker, a bar per hold
// (from grant to the end of Unlock) coloured by lock, a thin line per
// wait, a dark tick where a waiter gave up, and a red line at each
// violation. A MultiLock's hold is a bar of stripes, one per name.
// Hovering over a bar or line shows what it is.
func writeSVG(out io.Writer, attempts []attempt, locks []string, vs []violation) error {
	var workers []string
	row := map[string]int{}
	var from, to time.Time
	span := func(t time.Time) {
		if t.IsZero() {
			return
		}
		if from.IsZero() || t.Before(from) {
			from = t
		}
		if t.After(to) {
			to = t
		}
	}
	for i := range attempts {
		a := &attempts[i]
		if _, ok := row[a.Worker]; !ok {
			row[a.Worker] = 0
			workers = append(workers, a.Worker)
		}
		for _, t := range []time.Time{a.Start, a.Granted, a.UnlockEnd, a.Ended} {
			span(t)
		}
	}
	slices.SortFunc(workers, naturalCompare)
	for i, w := range workers {
		row[w] = i
	}
	total := max(to.Sub(from), time.Millisecond)
	x := func(t time.Time) float64 { return svgLeft + svgPlot*float64(t.Sub(from))/float64(total) }
	colour := map[string]string{}
	for i, l := range locks {
		colour[l] = fmt.Sprintf("hsl(%.0f,65%%,48%%)", math.Mod(float64(i)*137.508, 360))
	}
	height := svgTop + svgRow*len(workers) + svgBottom

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n",
		svgLeft+svgPlot+svgRight, height)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	fmt.Fprintf(&b, `<text x="10" y="16" font-size="14">fairlock stress: holds per worker, %d attempts, %d violations</text>`+"\n", len(attempts), len(vs))
	fmt.Fprintf(&b, `<text x="%d" y="16" text-anchor="end" fill="#555">bar: grant to Unlock returned%s · thin line: waiting · dark tick: gave up · red line: violation · time since the first call</text>`+"\n",
		svgLeft+svgPlot, barKey(attempts))
	legend(&b, locks, colour)
	axis(&b, total, len(workers), x, from)
	for i, w := range workers {
		y := svgTop + svgRow*i
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", svgLeft-6, y+svgBar, esc(w))
	}
	for i := range attempts {
		a := &attempts[i]
		y := float64(svgTop + svgRow*row[a.Worker])
		c := colour[a.Lock]
		if c == "" {
			c = "gray"
		}
		waitEnd := a.Granted
		if waitEnd.IsZero() {
			waitEnd = firstSet(a.Ended, to)
		}
		if a.Kind == kindLock && waitEnd.Sub(a.Start) > 0 && len(attempts) <= svgWaits {
			fmt.Fprintf(&b, `<line x1="%.2f" x2="%.2f" y1="%.1f" y2="%.1f" stroke="%s" stroke-opacity="0.45"><title>%s waits for %s</title></line>`+"\n",
				x(a.Start), x(waitEnd), y+svgBar/2, y+svgBar/2, c, esc(a.Worker), esc(a.Lock))
		}
		if a.Outcome == outGaveUp {
			fmt.Fprintf(&b, `<rect x="%.2f" y="%.1f" width="1" height="%d" fill="#333"><title>%s gave up on %s</title></rect>`+"\n",
				x(a.Ended), y+2, svgBar-4, esc(a.Worker), esc(a.Lock))
		}
		if !a.Held() {
			continue
		}
		end := firstSet(a.UnlockEnd, a.UnlockStart, to)
		if a.multi() {
			stripes(&b, a, y, x, colour, end)
			continue
		}
		what := esc(a.Lock)
		switch {
		case a.Type == runSemaphore:
			what = fmt.Sprintf("%d of the %d permits of %s", a.Weight, a.Permits, esc(a.Lock))
		case a.Type == runRWMutex && a.Write:
			what = "the write lock of " + esc(a.Lock)
		case a.Type == runRWMutex:
			what = "a read lock of " + esc(a.Lock)
		}
		from := a.Granted
		if !a.Downgrade.IsZero() {
			fmt.Fprintf(&b, `<rect x="%.2f" y="%.1f" width="%.2f" height="%d" fill="%s"><title>%s held %s, token %d, %v, then downgraded</title></rect>`+"\n",
				x(from), y, max(x(a.Downgrade)-x(from), 0.5), svgBar, c, esc(a.Worker), what, a.Token, a.Downgrade.Sub(from))
			from, what = a.Downgrade, "a read lock of "+esc(a.Lock)+" (downgraded)"
		}
		h := barHeight(a)
		fmt.Fprintf(&b, `<rect x="%.2f" y="%.1f" width="%.2f" height="%.1f" fill="%s"><title>%s held %s, token %d, %v</title></rect>`+"\n",
			x(from), y+svgBar-h, max(x(end)-x(from), 0.5), h, c, esc(a.Worker), what, a.Token, end.Sub(from))
	}
	for i, v := range vs {
		if i == svgMaxV || v.At.IsZero() {
			break
		}
		fmt.Fprintf(&b, `<line x1="%.2f" x2="%.2f" y1="%d" y2="%d" stroke="red" stroke-width="1.5"><title>%s</title></line>`+"\n",
			x(v.At), x(v.At), svgTop-4, height-svgBottom, esc(v.String()))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(out, b.String())
	return err
}

// barHeight returns the height of the bar of a hold: all of the row's
// for a Mutex's and a RWMutex's writer, a share as large as its permits
// for a Semaphore's, and a low one for a reader (or what a writer keeps
// after its downgrade).
func barHeight(a *attempt) float64 {
	switch {
	case a.Type == runSemaphore && a.Permits > 0:
		return max(svgBar*float64(a.Weight)/float64(a.Permits), 1)
	case a.Type == runRWMutex && (!a.Write || !a.Downgrade.IsZero()):
		return svgBar * 0.4
	}
	return svgBar
}

// stripes draws the holds of a granted MultiLock attempt on its row, y: a
// stripe per name, coloured by lock, from the grant of the name to end.
func stripes(b *strings.Builder, a *attempt, y float64, x func(time.Time) float64, colour map[string]string, end time.Time) {
	h := float64(svgBar) / float64(len(a.Parts))
	for i, p := range a.Parts {
		if p.Granted.IsZero() {
			continue
		}
		fmt.Fprintf(b, `<rect x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="%s"><title>%s held %s, token %d, %v, in its MultiLock of %s</title></rect>`+"\n",
			x(p.Granted), y+h*float64(i), max(x(end)-x(p.Granted), 0.5), h, cmp.Or(colour[p.Name], "gray"), esc(a.Worker), esc(p.Name), p.Token, end.Sub(p.Granted), esc(a.Lock))
	}
}

// barKey says what the height of a bar shows, when it shows anything.
func barKey(attempts []attempt) string {
	for i := range attempts {
		switch attempts[i].Type {
		case runSemaphore:
			return ", its height the permits held"
		case runRWMutex:
			return " (tall: the write lock, low: a read lock)"
		}
	}
	return ""
}

// legend draws a coloured box per lock.
func legend(b *strings.Builder, locks []string, colour map[string]string) {
	const maxShown = 24
	x := 10
	for i, l := range locks {
		if i == maxShown {
			fmt.Fprintf(b, `<text x="%d" y="38">and %d more</text>`+"\n", x, len(locks)-maxShown)
			break
		}
		fmt.Fprintf(b, `<rect x="%d" y="29" width="10" height="10" fill="%s"/><text x="%d" y="38">%s</text>`+"\n",
			x, colour[l], x+14, esc(l))
		x += 20 + 7*len(l)
	}
}

// axis draws the time axis with ticks at a round step.
func axis(b *strings.Builder, total time.Duration, rows int, x func(time.Time) float64, from time.Time) {
	step := time.Duration(1)
	for _, m := range []time.Duration{1, 2, 5} {
		for s := m; s < 1e12; s *= 10 {
			if total/s <= 12 && (step == 1 || s < step) {
				step = s
			}
		}
	}
	y0, y1 := svgTop-10, svgTop+svgRow*rows
	fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="black"/>`+"\n", svgLeft, svgLeft+svgPlot, y0, y0)
	for t := time.Duration(0); t <= total; t += step {
		xt := x(from.Add(t))
		fmt.Fprintf(b, `<line x1="%.2f" x2="%.2f" y1="%d" y2="%d" stroke="#ddd"/>`+"\n", xt, xt, y0, y1)
		fmt.Fprintf(b, `<text x="%.2f" y="%d" text-anchor="middle">%s</text>`+"\n", xt, y0-4, t)
	}
}

// esc escapes s for XML text and attributes.
func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder never fails
	return b.String()
}

// naturalCompare orders strings with numbers by value: "c2" before "c10".
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digits(a), digits(b)
		if da > 0 && db > 0 {
			na, _ := strconv.Atoi(a[:da])
			nb, _ := strconv.Atoi(b[:db])
			if na != nb {
				return na - nb
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

func digits(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}
