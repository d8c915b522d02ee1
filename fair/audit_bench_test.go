package fair

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// BenchmarkAuditLook is one look of the failover audit at auditMax calls,
// each on a lock of its own that keeps no trace of it: what the audit of
// a busy Client costs, once a second, in time and allocations. Run it
// with go test -run '^$' -bench AuditLook -benchmem -count 3 ./fair
func BenchmarkAuditLook(b *testing.B) {
	srv, err := redistest.Start()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Stop)
	e := mustEngine(b, srv.Client(b), Config{WaiterTTL: 10 * time.Second, CallTimeout: 5 * time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	a := e.audit.takenOver()
	for i := range auditMax {
		keys, err := queue.For("bench", fmt.Sprintf("n%d", i))
		if err != nil {
			b.Fatal(err)
		}
		l := e.Mutex(keys)
		a.ended(l, l, Request{Owner: fmt.Sprintf("o%d", i)}, l.entry(Request{Owner: "o", Lease: time.Minute}), nil, "")
	}
	for b.Loop() {
		a.look(a.due())
	}
}
