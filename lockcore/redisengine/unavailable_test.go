package redisengine

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/routelock/lock/lockcore"
)

// TestUnavailableSaysMisconfiguredOnce: an error that already says the
// client is set up wrongly (the restart guard refused by an ACL, say) keeps
// the prefix once when a call wraps it with what it was doing, and still
// matches ErrMisconfigured and what it wrapped.
func TestUnavailableSaysMisconfiguredOnce(t *testing.T) {
	inner := errors.New("NOPERM this user has no permissions to run the 'info' command")
	cause := fmt.Errorf("%w: the restart guard needs INFO and the keys routelock:restart-guard*: %w", lockcore.ErrMisconfigured, inner)
	err := unavailable("acquire", cause)
	const want = "routelock: misconfigured: acquire: the restart guard needs INFO and the keys routelock:restart-guard*: NOPERM this user has no permissions to run the 'info' command"
	if err.Error() != want {
		t.Errorf("unavailable: %q\nwant         %q", err, want)
	}
	if !errors.Is(err, lockcore.ErrMisconfigured) || !errors.Is(err, inner) || errors.Is(err, lockcore.ErrUnavailable) {
		t.Errorf("unavailable: %v matches ErrMisconfigured %v, its cause %v, ErrUnavailable %v; want true, true, false",
			err, errors.Is(err, lockcore.ErrMisconfigured), errors.Is(err, inner), errors.Is(err, lockcore.ErrUnavailable))
	}
	if n := strings.Count(err.Error(), "routelock: "); n != 1 {
		t.Errorf("%q says routelock: %d times", err, n)
	}
}
