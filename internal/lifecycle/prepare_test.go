package lifecycle

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/routelock/lock/lockcore"
)

// TestPrepareChecksOnce: Prepare merges a Core's defaults and refuses an
// invalid Policy or one the engine does not promise; a Policy it returned
// is not checked again by an acquisition through that Core (an invalid
// one, made so behind Prepare's back, gets through to the engine), while
// the same Policy rechecked, or given to another Core, is checked there.
func TestPrepareChecksOnce(t *testing.T) {
	e := &testEngine{}
	c := e.core()
	c.b = noPromises{}
	SetDefaults(c, Policy{Wait: lockcore.FailFast, MaxHold: time.Minute})
	if _, err := Prepare(e, Policy{TTL: time.Millisecond}); !errors.Is(err, lockcore.ErrMisconfigured) {
		t.Fatalf("Prepare of a 1ms TTL: %v, want ErrMisconfigured", err)
	}
	if _, err := Prepare(e, Policy{Share: 2}); !errors.Is(err, lockcore.ErrMisconfigured) {
		t.Fatalf("Prepare of permits on an engine without them: %v, want ErrMisconfigured", err)
	}
	p, err := Prepare(e, Policy{MaxHold: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if p.Wait != lockcore.FailFast || p.MaxHold != time.Minute {
		t.Fatalf("prepared %+v, want the default Wait and the default MaxHold as a ceiling", p)
	}
	if q, err := Prepare(e, p); err != nil || q != p {
		t.Fatalf("Prepare of a prepared Policy: %+v %v, want it as it is", q, err)
	}
	bad := p
	bad.TTL = time.Nanosecond // invalid, but still marked prepared
	ctx := context.Background()
	k := testKey(t)
	ls, err := e.Acquire(ctx, k, bad)
	if err != nil {
		t.Fatalf("an acquisition with a prepared Policy was checked again: %v", err)
	}
	_ = ls.Release(ctx)
	if _, err := e.Acquire(ctx, k, Recheck(bad)); !errors.Is(err, lockcore.ErrMisconfigured) {
		t.Fatalf("a rechecked invalid Policy: %v, want ErrMisconfigured", err)
	}
	other := &testEngine{}
	if _, err := other.Acquire(ctx, k, bad); !errors.Is(err, lockcore.ErrMisconfigured) {
		t.Fatalf("a Policy prepared for another Core: %v, want ErrMisconfigured", err)
	}
	if got := Over(other, p); got.prepared != nil {
		t.Fatalf("Over another Core keeps the first one's mark: %+v", got)
	}
}

// noPromises is an engine that promises nothing beyond exclusion; it is
// never asked for a hold here.
type noPromises struct{ lockcore.Engine }

func (noPromises) Promises() lockcore.Promises { return lockcore.Promises{} }
