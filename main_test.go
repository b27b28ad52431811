package lock_test

import (
	"os"
	"testing"

	"github.com/routelock/lock/internal/redistest"
)

func TestMain(m *testing.M) {
	if os.Getenv(idemChildEnv) != "" {
		os.Exit(idemChildMain()) // the test binary run again as another app instance
	}
	redistest.Main(m)
}
