package lock

import (
	"github.com/routelock/lock/lockcore"
)

// Wrapped returns the engine the Locker's routes lock through: the engine
// of New or FromEngine, wrapped by its observers.
func (l *Locker) Wrapped() lockcore.Engine { return l.engine }
