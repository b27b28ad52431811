package locktest_test

import (
	"sync"
	"testing"

	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// TestConformance runs the conformance suite on the in-memory engine: one
// Engine per check, which both of the check's engines are.
func TestConformance(t *testing.T) {
	var mu sync.Mutex
	engines := make(map[*testing.T]*locktest.Engine)
	locktest.Run(t, func(t *testing.T, ev lockcore.Events) lockcore.Engine {
		mu.Lock()
		defer mu.Unlock()
		e := engines[t]
		if e == nil {
			e = &locktest.Engine{Events: ev}
			engines[t] = e
		}
		return e
	})
}
