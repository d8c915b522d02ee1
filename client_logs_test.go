package fairlock_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// logRecorder is a slog.Handler that keeps every record at Warn or above
// (Info too with info, Debug too with debug): as one line of text, its
// message and its own attributes (those added with Logger.With are left
// out), and as a logRecord with every attribute, those added with
// Logger.With included.
type logRecorder struct {
	info  bool // records Info too; else Warn and above only
	debug bool // records Debug too
	// with are the attributes added with Logger.With, and keeper the
	// recorder that keeps the records (nil: this one), for the handlers
	// WithAttrs returns.
	with   []slog.Attr
	keeper *logRecorder

	mu    sync.Mutex
	lines []string // guarded by mu
	// errs, guarded by mu, holds each record's error attribute, nil for
	// a record with none: errs[i] is that of lines[i].
	errs    []error
	records []logRecord // guarded by mu; records[i] is lines[i]
}

// logRecord is one record a logRecorder kept.
type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]slog.Value // every attribute, by key
}

func (r logRecord) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %q", r.level, r.msg)
	for k, v := range r.attrs {
		fmt.Fprintf(&b, " %s=%v", k, v)
	}
	return b.String()
}

// has reports whether the record has the attribute key.
func (r logRecord) has(key string) bool {
	_, ok := r.attrs[key]
	return ok
}

// str returns the attribute key as a string ("" when absent).
func (r logRecord) str(key string) string {
	v, ok := r.attrs[key]
	if !ok {
		return ""
	}
	return v.String()
}

// duration returns the attribute key as a duration (0 when absent or of
// another kind).
func (r logRecord) duration(key string) time.Duration {
	v, ok := r.attrs[key]
	if !ok || v.Kind() != slog.KindDuration {
		return 0
	}
	return v.Duration()
}

func (h *logRecorder) Enabled(_ context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || h.info && l >= slog.LevelInfo || h.debug
}

func (h *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	var err error
	r := logRecord{level: rec.Level, msg: rec.Message, attrs: map[string]slog.Value{}}
	for _, a := range h.with {
		r.attrs[a.Key] = a.Value.Resolve()
	}
	b.WriteString(rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		if e, ok := a.Value.Any().(error); ok && err == nil {
			err = e
		}
		r.attrs[a.Key] = a.Value.Resolve()
		return true
	})
	k := h.store()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.lines = append(k.lines, b.String())
	k.errs = append(k.errs, err)
	k.records = append(k.records, r)
	return nil
}

// store is the recorder that keeps h's records.
func (h *logRecorder) store() *logRecorder {
	if h.keeper != nil {
		return h.keeper
	}
	return h
}

func (h *logRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &logRecorder{info: h.info, debug: h.debug, with: append(append([]slog.Attr(nil), h.with...), as...), keeper: h.store()}
}

func (h *logRecorder) WithGroup(string) slog.Handler { return h }

// errorOf returns the error of the first record that mentions what, or
// nil when no record with an error does.
func (h *logRecorder) errorOf(what string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, l := range h.lines {
		if h.errs[i] != nil && strings.Contains(l, what) {
			return h.errs[i]
		}
	}
	return nil
}

func (h *logRecorder) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.lines...)
}

// kept returns the records kept so far.
func (h *logRecorder) kept() []logRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]logRecord(nil), h.records...)
}

// find returns the records whose message contains msg.
func (h *logRecorder) find(msg string) []logRecord {
	var out []logRecord
	for _, r := range h.kept() {
		if strings.Contains(r.msg, msg) {
			out = append(out, r)
		}
	}
	return out
}
