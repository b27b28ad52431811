package lock

import "github.com/routelock/lock/lockcore"

// Backend returns the engine of New or FromEngine.
func (l *Locker) Backend() lockcore.Engine { return l.backend }
