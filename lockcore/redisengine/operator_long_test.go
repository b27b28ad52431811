//go:build long

package redisengine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/routelock/lock/internal/faultproxy"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestRevokeSentTwiceFindsNothing: a revocation whose first run finds the
// lock free, and whose reply is lost, is sent again by the client (go-redis
// at its defaults) after a request took the lock: it must answer ErrNotHeld,
// as its first run did, and leave that holder alone.
func TestRevokeSentTwiceFindsNothing(t *testing.T) {
	t.Parallel() // it mostly waits on timers; its keys are its own
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		for _, k := range healKinds {
			t.Run(k.name, func(t *testing.T) { revokeSentTwiceFindsNothing(t, b, k) })
		}
	})
}

func revokeSentTwiceFindsNothing(t *testing.T, b *redistest.Backend, k clientKind) {
	prefix := redistest.Prefix(t)
	p := faultproxy.Start(t, b.Addr)
	t.Cleanup(p.Close)
	op := lockerOn(t, k.client(t, p.Addr), prefix, Options{})
	holderEng := newLocker(t, b, prefix, Options{})
	ctx := context.Background()
	key := mustKey(t, "twice", "free")
	if err := op.run.load(ctx, revokeScript); err != nil {
		t.Fatal(err)
	}
	// Between the first run and the client's second try, a request
	// takes the lock.
	var holder *lifecycle.Lease
	var herr error
	p.AfterLoss(func() { holder, herr = holderEng.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast}) })
	p.LoseReplyTo([]byte(op.run.sha(revokeScript)), 1)
	rev, err := op.Revoke(ctx, key, "sent twice")
	if p.LostReplies() != 1 {
		t.Fatalf("%d replies lost, want 1: the fault did not happen", p.LostReplies())
	}
	if herr != nil {
		t.Fatalf("the request between the two tries: %v", herr)
	}
	defer holder.Release(ctx)
	if !errors.Is(err, lockcore.ErrNotHeld) {
		t.Errorf("Revoke: %+v, %v; want ErrNotHeld, as its first run found", rev, err)
	}
	// A revocation tells the holding Engine at once; give it time to.
	select {
	case <-holder.Context().Done():
		t.Fatalf("the holder that came after the first run was revoked: %v", context.Cause(holder.Context()))
	case <-time.After(500 * time.Millisecond):
	}
	info := inspect(t, op, key)
	if holdCount(info, holder.Token()) != 1 || len(info.Audit) != 0 {
		t.Fatalf("after a revocation that found nothing, sent twice: %+v; want the holder's hold and no audit record", info)
	}
}
