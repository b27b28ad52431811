package locktest_test

import (
	"sync"
	"testing"

	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// byValue is an engine of a third party's, passed by value: its type
// cannot be compared.
type byValue struct {
	*locktest.Engine
	labels []string
}

// wrapped is an engine passed by value whose type can be compared.
type wrapped struct{ lockcore.Engine }

func TestConformanceByValue(t *testing.T) {
	share := sharedBackends()
	locktest.Run(t, func(t *testing.T, ev lockcore.Events) lockcore.Engine {
		e := share(t, ev)
		return byValue{Engine: e, labels: []string{"a"}}
	})
}

func TestConformanceWrapped(t *testing.T) {
	share := sharedBackends()
	locktest.Run(t, func(t *testing.T, ev lockcore.Events) lockcore.Engine {
		e := share(t, ev)
		return wrapped{e}
	})
}

// sharedBackends returns a function that gives the engines made with one
// t one in-memory backend, as Run asks of engines made with one t.
func sharedBackends() func(*testing.T, lockcore.Events) *locktest.Engine {
	var mu sync.Mutex
	engines := map[*testing.T]*locktest.Engine{}
	return func(t *testing.T, ev lockcore.Events) *locktest.Engine {
		mu.Lock()
		defer mu.Unlock()
		e, ok := engines[t]
		if !ok {
			e = &locktest.Engine{Events: ev}
			engines[t] = e
		}
		return e
	}
}
