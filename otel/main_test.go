package otel_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/fairlock/fairlock/internal/redistest"
)

// The tests share one redis-server (each with its own key prefix), started
// and stopped by redistest around them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(redistest.Runner(m))
}
