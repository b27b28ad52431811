package outcome

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/routelock/lock/lockcore"
)

// TestOf: the kinds each error reports, alone, wrapped and joined, with
// and without sentinels of the caller's own.
func TestOf(t *testing.T) {
	mine := errors.New("mine")
	more := []Sentinel{{mine, TooLarge}, {lockcore.ErrLockLost, NotFound}}
	busy := &lockcore.ContentionError{Key: "k"}
	timedOut := &lockcore.ContentionError{Key: "k", TimedOut: true}
	for _, tc := range []struct {
		name string
		err  error
		more []Sentinel
		want Kind
	}{
		{"nil", nil, nil, 0},
		{"nil with more", nil, more, 0},
		{"unknown", errors.New("something else"), nil, 0},
		{"NotAcquired", lockcore.ErrNotAcquired, nil, Busy},
		{"WaitTimeout", lockcore.ErrWaitTimeout, nil, Busy | WaitTimeout},
		{"ContentionError", busy, nil, Busy},
		{"ContentionError timed out", timedOut, nil, Busy | WaitTimeout},
		{"Unavailable", lockcore.ErrUnavailable, nil, Unavailable},
		{"Closed", lockcore.ErrClosed, nil, Closed},
		{"Misconfigured", lockcore.ErrMisconfigured, nil, Misconfigured},
		{"InvalidKey", lockcore.ErrInvalidKey, nil, InvalidKey},
		{"InvalidToken", lockcore.ErrInvalidToken, nil, InvalidToken},
		{"Canceled", context.Canceled, nil, Canceled},
		{"DeadlineExceeded", context.DeadlineExceeded, nil, DeadlineExceeded},
		{"LockLost", lockcore.ErrLockLost, nil, 0},
		{"Revoked", lockcore.ErrRevoked, nil, 0},
		{"Released", lockcore.ErrReleased, nil, 0},
		{"NotHeld", lockcore.ErrNotHeld, nil, 0},
		{"wrapped", fmt.Errorf("acquire: %w", fmt.Errorf("%w: dial", lockcore.ErrUnavailable)), nil, Unavailable},
		{"engine error with deadline", fmt.Errorf("%w: %w", lockcore.ErrUnavailable, context.DeadlineExceeded), nil, Unavailable | DeadlineExceeded},
		{"joined", errors.Join(timedOut, context.Canceled, lockcore.ErrClosed), nil, Busy | WaitTimeout | Canceled | Closed},
		{"more", fmt.Errorf("key: %w", mine), more, TooLarge},
		{"more, not given", mine, nil, 0},
		{"more and own", errors.Join(mine, lockcore.ErrInvalidKey), more, TooLarge | InvalidKey},
		{"more matches a sentinel of its own", lockcore.ErrRevoked, more, NotFound},
	} {
		if got := Of(tc.err, tc.more...); got != tc.want {
			t.Errorf("%s: Of(%v) = %b, want %b", tc.name, tc.err, got, tc.want)
		}
	}
}

// TestKindsDistinct: each kind is its own bit.
func TestKindsDistinct(t *testing.T) {
	all := []Kind{Busy, WaitTimeout, Unavailable, Closed, Misconfigured, InvalidKey, InvalidToken,
		TooLarge, NotFound, NotApplicable, Canceled, DeadlineExceeded}
	var seen Kind
	for i, k := range all {
		if k == 0 || k&(k-1) != 0 || seen.Has(k) {
			t.Errorf("kind %d = %b: not a bit of its own", i, k)
		}
		seen |= k
	}
	if ContextEnded != Canceled|DeadlineExceeded {
		t.Errorf("ContextEnded = %b", ContextEnded)
	}
}

// TestFirst: the first row that shares a kind answers, in the order of
// the rows; no row, the default.
func TestFirst(t *testing.T) {
	rows := []Row[string]{
		{Unavailable | Closed, "unavailable"},
		{ContextEnded, "cancelled"},
		{Busy, "busy"},
	}
	for _, tc := range []struct {
		k    Kind
		want string
	}{
		{0, "default"},
		{Misconfigured, "default"},
		{Busy, "busy"},
		{Busy | WaitTimeout | Canceled, "cancelled"},
		{DeadlineExceeded | Unavailable, "unavailable"},
		{Closed | Busy, "unavailable"},
	} {
		if got := First(tc.k, rows, "default"); got != tc.want {
			t.Errorf("First(%b) = %s, want %s", tc.k, got, tc.want)
		}
	}
	if got := First(Busy, nil, 7); got != 7 {
		t.Errorf("First with no rows = %d, want the default", got)
	}
	if Busy.Has(0) || !(Busy | Closed).Has(Closed|Canceled) || Busy.Has(Closed) {
		t.Error("Has")
	}
}
