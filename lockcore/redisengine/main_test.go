package redisengine

import (
	"os"
	"testing"

	"github.com/routelock/lock/internal/redistest"
)

func TestMain(m *testing.M) {
	if os.Getenv("ROUTELOCK_CHILD") != "" {
		os.Exit(childMain()) // a process of TestCrashedHolder or TestPausedHolder
	}
	redistest.Main(m)
}
