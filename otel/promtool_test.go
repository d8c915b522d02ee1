package otel_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

// promtool returns the path of Prometheus' promtool. Without it the test
// is skipped, unless CI is "true": the CI script installs it, so there
// the test fails.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("promtool is not installed, and CI=true requires it (Debian: apt-get install prometheus): %v", err)
	}
	t.Skipf("promtool is not installed (Debian: apt-get install prometheus; CI installs it): %v", err)
	return ""
}

// runPromtool runs promtool with args and returns its output, failing t
// when it fails.
func runPromtool(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(promtool(t), args...).CombinedOutput()
	require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

// scrapes records what Prometheus would scrape from processes, each a
// registry the otel exporter writes to, one scrape of all of them a
// minute (a step), and writes the series as the input of a promtool
// rules test.
type scrapes struct {
	t         *testing.T
	processes map[string]*prometheus.Registry // by instance label
	steps     int                             // scrapes taken
	// series holds the value of each series at each scrape, NaN-free:
	// a scrape without it has no entry.
	series map[string]map[int]float64
}

func newScrapes(t *testing.T) *scrapes {
	return &scrapes{t: t, processes: map[string]*prometheus.Registry{}, series: map[string]map[int]float64{}}
}

// add names the process whose metrics registry exports, by the label
// instance.
func (s *scrapes) add(instance string, registry *prometheus.Registry) {
	s.processes[instance] = registry
}

// scrape takes the next scrape of every process, and returns its step.
func (s *scrapes) scrape() int {
	s.t.Helper()
	step := s.steps
	for instance, registry := range s.processes {
		families, err := registry.Gather()
		require.NoError(s.t, err)
		for _, f := range families {
			if !strings.HasPrefix(f.GetName(), "fairlock_") {
				continue
			}
			for _, m := range f.GetMetric() {
				labels := map[string]string{"job": "app", "instance": instance}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				s.record(f, m, labels, step)
			}
		}
	}
	s.steps++
	return step
}

// record records the samples of one metric of a family at step: a
// histogram's buckets, sum and count, or a counter's or gauge's value.
func (s *scrapes) record(f *dto.MetricFamily, m *dto.Metric, labels map[string]string, step int) {
	name := f.GetName()
	switch f.GetType() {
	case dto.MetricType_COUNTER:
		s.set(name, labels, step, m.GetCounter().GetValue())
	case dto.MetricType_GAUGE:
		s.set(name, labels, step, m.GetGauge().GetValue())
	case dto.MetricType_HISTOGRAM:
		h := m.GetHistogram()
		for _, b := range h.GetBucket() {
			s.set(name+"_bucket", with1(labels, "le", strconv.FormatFloat(b.GetUpperBound(), 'f', -1, 64)), step, float64(b.GetCumulativeCount()))
		}
		s.set(name+"_bucket", with1(labels, "le", "+Inf"), step, float64(h.GetSampleCount()))
		s.set(name+"_sum", labels, step, h.GetSampleSum())
		s.set(name+"_count", labels, step, float64(h.GetSampleCount()))
	default:
		s.t.Fatalf("%s: unexpected metric type %v", name, f.GetType())
	}
}

// with1 returns labels with one more.
func with1(labels map[string]string, name, value string) map[string]string {
	out := map[string]string{name: value}
	for k, v := range labels {
		out[k] = v
	}
	return out
}

// set records the value of a series at step.
func (s *scrapes) set(name string, labels map[string]string, step int, v float64) {
	key := name + selector(labels)
	if s.series[key] == nil {
		s.series[key] = map[int]float64{}
	}
	s.series[key][step] = v
}

// selector returns labels in PromQL's notation, sorted by name.
func selector(labels map[string]string) string {
	names := make([]string, 0, len(labels))
	for name := range labels {
		names = append(names, name)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = name + "=" + strconv.Quote(labels[name])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// values returns the samples of a series in promtool's notation: a value
// at each scrape that had it, '_' at one before its first, and 'stale' at
// the first without it after one with it (Prometheus marks a series that
// left a scrape stale), '_' after that.
func (s *scrapes) values(key string) string {
	var out []string
	present := false
	for step := range s.steps {
		v, ok := s.series[key][step]
		switch {
		case ok:
			out = append(out, strconv.FormatFloat(v, 'f', -1, 64))
		case present:
			out = append(out, "stale")
		default:
			out = append(out, "_")
		}
		present = ok
	}
	return strings.Join(out, " ")
}

// firing is what a check expects of an alert at a scrape: the labels of
// each alert firing then, of those that a check compares.
type firing struct {
	alert  string
	step   int
	alerts []map[string]string // nil or empty: none fires
}

// checkedLabels are the labels of an alert that the checks compare.
var checkedLabels = []string{"instance", "fairlock_lock_kind", "fairlock_lock_outcome", "fairlock_lock_name"}

// write writes a promtool rules test of rules, the series scraped as its
// input and a check of each of checks, to a file in a directory of t's,
// and returns its path.
func (s *scrapes) write(rules string, checks []firing) string {
	s.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "rule_files:\n  - %s\nevaluation_interval: 1m\ntests:\n  - name: what the Observer exported\n    interval: 1m\n    input_series:\n", quote(rules))
	keys := make([]string, 0, len(s.series))
	for key := range s.series {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	for _, key := range keys {
		fmt.Fprintf(&b, "      - series: %s\n        values: %s\n", quote(key), quote(s.values(key)))
	}
	b.WriteString("    promql_expr_test:\n")
	for _, c := range checks {
		fmt.Fprintf(&b, "      - expr: %s\n        eval_time: %dm\n",
			quote(fmt.Sprintf("count by (%s) (ALERTS{alertname=%q, alertstate=\"firing\"})", strings.Join(checkedLabels, ", "), c.alert)), c.step)
		if len(c.alerts) == 0 {
			b.WriteString("        exp_samples: []\n")
			continue
		}
		b.WriteString("        exp_samples:\n")
		for _, labels := range c.alerts {
			fmt.Fprintf(&b, "          - labels: %s\n            value: 1\n", quote(selector(labels)))
		}
	}
	path := filepath.Join(s.t.TempDir(), "scraped_test.yml")
	require.NoError(s.t, os.WriteFile(path, []byte(b.String()), 0o644))
	return path
}

// quote returns s as a YAML single-quoted scalar.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
