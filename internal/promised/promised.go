// Package promised tells whether an engine promises what a Policy asks of
// it: the HTTP middleware and the gRPC interceptors ask when a route or
// method is built, so that a mode the engine does not serve fails at
// startup, not at the first request.
package promised

import (
	"fmt"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/lockcore"
)

// Refusal returns an error matching lockcore.ErrMisconfigured when e does
// not promise to serve p (a Share without lockcore.Shared for readers, or
// lockcore.Permits for permits), and nil when it does.
func Refusal(e lifecycle.Locker, p lifecycle.Policy) error {
	var what string
	switch ps := lifecycle.PromisesOf(e); {
	case p.Share == lockcore.ShareAll && !ps.Shared:
		what = "shared holds (lockcore.Promises.Shared)"
	case p.Share > 0 && !ps.Permits:
		what = "permits (lockcore.Promises.Permits)"
	default:
		return nil
	}
	return fmt.Errorf("%w: Share %d: the engine (%T) does not promise %s", lockcore.ErrMisconfigured, p.Share, e, what)
}
