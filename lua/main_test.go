package lua_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/fairlock/fairlock/internal/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(redistest.Runner(m))
}
