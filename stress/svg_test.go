package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countSVGElements parses r as XML and counts its elements by name; the
// test fails if r is not well-formed SVG.
func countSVGElements(t *testing.T, r io.Reader) map[string]int {
	t.Helper()
	counts := map[string]int{}
	dec := xml.NewDecoder(r)
	root := ""
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
				assert.Equal(t, "http://www.w3.org/2000/svg", se.Name.Space)
			}
			counts[se.Name.Local]++
		}
	}
	require.Equal(t, "svg", root)
	return counts
}

func TestTimelineIsWellFormedSVG(t *testing.T) {
	h := cleanHistory()
	h[0].Worker = `w<1>&"quoted"` // names are escaped
	vs := []violation{{Kind: overlapped, Lock: "a", At: at(3), Detail: "a <b> & c"}}
	var b bytes.Buffer
	require.NoError(t, writeSVG(&b, h, []string{"a", "b"}, vs))
	counts := countSVGElements(t, &b)
	holds := 0
	for _, a := range h {
		if a.Held() {
			holds++
		}
	}
	// A white background, a legend box per lock, a bar per hold, a tick
	// per give-up.
	assert.Equal(t, 1+2+holds+1, counts["rect"])
	assert.Positive(t, counts["text"])
	assert.Positive(t, counts["title"])
}

func TestTimelineOfAnEmptyRunIsWellFormed(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, writeSVG(&b, nil, []string{"lock-0"}, nil))
	countSVGElements(t, &b)
}

func TestNaturalCompareOrdersNumbersByValue(t *testing.T) {
	assert.Negative(t, naturalCompare("p0/c2/g1", "p0/c10/g0"))
	assert.Positive(t, naturalCompare("p1/c0/g0", "p0/c9/g9"))
	assert.Zero(t, naturalCompare("p0/c1", "p0/c1"))
	assert.Negative(t, naturalCompare("p0", "p0/c1"))
}

func TestTimelineDrawsWeightsAndDowngrades(t *testing.T) {
	h := cleanRWMutexHistory() // one writer downgraded: two bars
	var b bytes.Buffer
	require.NoError(t, writeSVG(&b, h, []string{"a"}, nil))
	svg := b.String()
	counts := countSVGElements(t, bytes.NewReader(b.Bytes()))
	holds := 0
	for _, a := range h {
		if a.Held() {
			holds++
		}
	}
	assert.Equal(t, 1+1+holds+1, counts["rect"])
	assert.Contains(t, svg, "(tall: the write lock, low: a read lock)")
	assert.Contains(t, svg, "X held the write lock of a, token 3, 1.5ms, then downgraded")
	assert.Contains(t, svg, "X held a read lock of a (downgraded), token 3, 2.5ms")
	assert.Contains(t, svg, `height="4.0" fill="hsl(0,65%,48%)"><title>R1 held a read lock of a`)

	b.Reset()
	require.NoError(t, writeSVG(&b, cleanSemaphoreHistory(), []string{"a"}, nil))
	assert.Contains(t, b.String(), "its height the permits held")
	assert.Contains(t, b.String(), `height="6.7" fill="hsl(0,65%,48%)"><title>B held 2 of the 3 permits of a`)
}
