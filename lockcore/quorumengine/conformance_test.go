package quorumengine

import (
	"testing"

	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// TestConformance runs the conformance suite over engines on three
// masters: every check of what the engine promises.
func TestConformance(t *testing.T) {
	cs := masters(t, 3)
	locktest.Run(t, func(t *testing.T, ev lockcore.Events) lockcore.Engine {
		return newEngine(t, cs, Options{Prefix: "conformance:", Events: ev})
	})
}
