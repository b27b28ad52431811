package lockcore

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/routelock/lock/internal/redistest"
)

func TestMain(m *testing.M) {
	if os.Getenv("ROUTELOCK_CHILD") != "" {
		os.Exit(childMain()) // a process of TestCrashedHolder or TestPausedHolder
	}
	code := m.Run()
	redistest.StopShared()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
