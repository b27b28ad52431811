package redisengine

// The Operator: Inspect, List and Revoke, on miniredis, a real server and
// a cluster.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/enginetest"
	"github.com/routelock/lock/internal/faultproxy"
	"github.com/routelock/lock/internal/keylimit"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/operate"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// noTokens fails the test when the JSON of v contains one of tokens.
func noTokens(t *testing.T, v any, tokens ...string) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range tokens {
		if tok == "" {
			t.Fatal("noTokens: empty token")
		}
		if strings.Contains(string(b), tok) {
			t.Fatalf("an owner token appears in %s", b)
		}
	}
}

// near reports whether a is within d of b.
func near(a, b time.Time, d time.Duration) bool { return a.Sub(b).Abs() <= d }

// TestRevoke: an operator revokes a hold while its holder runs and a
// waiter queues behind it. The holder's lease context is cancelled with
// cause ErrRevoked (and so ErrLockLost) within a third of its TTL (one
// renewal interval) of the revocation; the waiter gets the lock with a
// fencing token above the revocation's NewFence, which is above the
// revoked hold's fence; Inspect shows the audit record; the revoked
// holder's release fails as lost and leaves the waiter's hold alone.
// Revoking a free key says ErrNotHeld; a bad reason or the zero Key is
// refused and revokes nothing.
func TestRevoke(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		const ttl = 600 * time.Millisecond
		prefix := redistest.Prefix(t)
		holderEng := newLocker(t, b, prefix, Options{TTL: ttl})
		waiterEng := newLocker(t, b, prefix, Options{TTL: ttl})
		op := newLocker(t, b, prefix, Options{})
		third := newLocker(t, b, prefix, Options{})
		ctx := context.Background()
		key := mustKey(t, "productID", "42")

		holder, err := holderEng.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		got, errc := acquireAsync(waiterEng, key, 10*time.Second)
		eventually(t, 5*time.Second, "waiter queued", func() bool { return len(inspect(t, op, key).Waiters) == 1 })

		// Refused revocations change nothing.
		for _, reason := range []string{"", strings.Repeat("x", operate.MaxReasonLen+1), "two\nlines", "bell\a", "\xff\xfe"} {
			if _, err := op.Revoke(ctx, key, reason); !errors.Is(err, lockcore.ErrInvalidReason) || errors.Is(err, lockcore.ErrInvalidKey) {
				t.Errorf("Revoke with reason %q: %v, want ErrInvalidReason", reason, err)
			}
		}
		if _, err := op.Revoke(ctx, lockcore.Key{}, "zero key"); !errors.Is(err, lockcore.ErrInvalidKey) {
			t.Errorf("Revoke of the zero Key: %v, want ErrInvalidKey", err)
		}
		if err := holder.Context().Err(); err != nil {
			t.Fatalf("a refused revocation ended the holder: %v", context.Cause(holder.Context()))
		}
		if info := inspect(t, op, key); holdCount(info, holder.Token()) != 1 || len(info.Audit) != 0 {
			t.Fatalf("after refused revocations: %+v", info)
		}

		const reason = "export job stuck since 03:00, ticket OPS-1234"
		asked := time.Now()
		rev, err := op.Revoke(ctx, key, reason)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-holder.Context().Done():
		case <-time.After(ttl / 3):
			t.Fatalf("holder's context not cancelled within %v (a renewal interval) of the revocation", ttl/3)
		}
		t.Logf("holder learnt of the revocation %v after it was asked for", time.Since(asked))
		if cause := context.Cause(holder.Context()); !errors.Is(cause, lockcore.ErrRevoked) || !errors.Is(cause, lockcore.ErrLockLost) {
			t.Fatalf("holder's cause %v, want ErrRevoked (and ErrLockLost)", cause)
		}
		if err := holder.Err(); !errors.Is(err, lockcore.ErrRevoked) {
			t.Errorf("holder's Err %v, want ErrRevoked", err)
		}

		if rev.Key != key.String() || rev.Reason != reason || rev.Owner != operate.OwnerDigest(holder.Token()) || rev.Fence != holder.Fence() {
			t.Errorf("revocation %+v; want key %s, the holder's owner digest %s and fence %d", rev, key, operate.OwnerDigest(holder.Token()), holder.Fence())
		}
		if rev.NewFence <= rev.Fence {
			t.Errorf("NewFence %d not above the revoked fence %d", rev.NewFence, rev.Fence)
		}
		if !near(rev.At, asked, 5*time.Second) {
			t.Errorf("revocation at %v, asked at %v", rev.At, asked)
		}

		w := awaitLease(t, got, errc, 5*time.Second, "the waiter after the revocation")
		defer w.Release(ctx)
		// The script draws the waiter's token after moving the counter to
		// NewFence: strictly above it, and so above the revoked fence.
		if w.Fence() <= rev.NewFence {
			t.Errorf("waiter's fence %d not above NewFence %d (revoked fence %d)", w.Fence(), rev.NewFence, rev.Fence)
		}

		info := inspect(t, op, key)
		if len(info.Audit) != 1 {
			t.Fatalf("audit %+v, want the one revocation", info.Audit)
		}
		if a := info.Audit[0]; a.Key != rev.Key || a.Owner != rev.Owner || a.Fence != rev.Fence || a.NewFence != rev.NewFence ||
			a.Reason != reason || !a.At.Equal(rev.At) {
			t.Errorf("audit record %+v, want %+v", a, rev)
		}
		if info.LastFence < w.Fence() {
			t.Errorf("LastFence %d below the waiter's fence %d", info.LastFence, w.Fence())
		}
		noTokens(t, info, holder.Token(), w.Token())
		noTokens(t, rev, holder.Token())

		// The revoked holder's release fails, and the waiter keeps the lock.
		if err := holder.Release(ctx); !errors.Is(err, lockcore.ErrLockLost) {
			t.Errorf("release of the revoked lease: %v, want ErrLockLost", err)
		}
		info = inspect(t, op, key)
		if len(info.Holders) != 1 || holdCount(info, w.Token()) != 1 || info.Fence != w.Fence() {
			t.Fatalf("after the revoked holder's release: %+v; want the waiter's hold (fence %d)", info, w.Fence())
		}
		if ls, err := third.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast}); err == nil {
			_ = ls.Release(ctx)
			t.Fatal("another owner took the lock the waiter holds")
		}
		if err := w.Context().Err(); err != nil {
			t.Fatalf("the waiter's lease ended: %v", context.Cause(w.Context()))
		}

		if err := w.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := op.Revoke(ctx, key, "nobody holds it"); !errors.Is(err, lockcore.ErrNotHeld) {
			t.Errorf("Revoke of a free key: %v, want ErrNotHeld", err)
		}
		if n := len(inspect(t, op, key).Audit); n != 1 {
			t.Errorf("%d audit records after a Revoke of a free key, want 1", n)
		}
	})
}

// TestRevokeReentered: revoking a hold that a second Engine re-entered
// under the holder's token ends both leases, each with ErrRevoked, and
// frees the key.
func TestRevokeReentered(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		a := newLocker(t, b, prefix, Options{TTL: 600 * time.Millisecond})
		bl := newLocker(t, b, prefix, Options{TTL: 600 * time.Millisecond})
		ctx := context.Background()
		key := mustKey(t, "reentered", "1")
		outer, err := a.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		inner, err := bl.Acquire(enginetest.WithToken(ctx, outer.Token()), key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		rev, err := a.Revoke(ctx, key, "both")
		if err != nil {
			t.Fatal(err)
		}
		if rev.Owner != operate.OwnerDigest(outer.Token()) || rev.Fence != outer.Fence() {
			t.Errorf("revocation %+v", rev)
		}
		for _, ls := range []*lifecycle.Lease{outer, inner} {
			select {
			case <-ls.Context().Done():
			case <-time.After(time.Second):
				t.Fatal("a lease of the revoked hold is live")
			}
			if cause := context.Cause(ls.Context()); !errors.Is(cause, lockcore.ErrRevoked) {
				t.Errorf("cause %v, want ErrRevoked", cause)
			}
			if err := ls.Release(ctx); !errors.Is(err, lockcore.ErrLockLost) {
				t.Errorf("release of a revoked lease: %v", err)
			}
		}
		if info := inspect(t, a, key); len(info.Holders) > 0 {
			t.Fatalf("held after its revocation: %+v", info)
		}
	})
}

// TestRevokeFoundByRenewal: without the message that tells the holding
// Engine at once, the holder learns of the revocation at its next
// renewal: its context is cancelled with ErrRevoked (not the ErrLockLost
// of a lease that ran out, whose validity lasts 0.9 TTL) within a renewal
// interval, TTL/3, plus the renewal's round trip.
func TestRevokeFoundByRenewal(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		const ttl = 600 * time.Millisecond
		prefix := redistest.Prefix(t)
		l := newLocker(t, b, prefix, Options{TTL: ttl})
		op := newLocker(t, b, prefix, Options{})
		ctx := context.Background()
		key := mustKey(t, "renewal", "1")
		ls, err := l.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		defer ls.Release(ctx)
		revoked := time.Now()
		if _, err := op.revoke(ctx, key, "found by renewal", false); err != nil {
			t.Fatal(err)
		}
		const slack = 150 * time.Millisecond
		select {
		case <-ls.Context().Done():
		case <-time.After(ttl/3 + slack):
			t.Fatalf("holder's context not cancelled within %v of the revocation", ttl/3+slack)
		}
		t.Logf("the renewal found the revocation %v after it", time.Since(revoked))
		if cause := context.Cause(ls.Context()); !errors.Is(cause, lockcore.ErrRevoked) {
			t.Fatalf("cause %v, want ErrRevoked", cause)
		}
	})
}

// TestReleaseFindsRevocation: a holder that releases after its hold was
// revoked, before any renewal told it, gets ErrRevoked from Release (not a
// success), and its release leaves alone the hold that another owner took
// since, even with the revoked hold's own token.
func TestReleaseFindsRevocation(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		l := newLocker(t, b, prefix, Options{TTL: 10 * time.Second}) // no renewal for 2.5 s
		other := newLocker(t, b, prefix, Options{})
		ctx := context.Background()
		key := mustKey(t, "release", "1")
		ls, err := l.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.revoke(ctx, key, "released after revocation", false); err != nil {
			t.Fatal(err)
		}
		if err := ls.Context().Err(); err != nil {
			t.Fatalf("the holder was told: %v; this case is about a holder not yet told", context.Cause(ls.Context()))
		}
		newer, err := other.Acquire(enginetest.WithToken(ctx, ls.Token()), key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		defer newer.Release(ctx)
		if err := ls.Release(ctx); !errors.Is(err, lockcore.ErrRevoked) {
			t.Errorf("release of a revoked hold: %v, want ErrRevoked", err)
		}
		info := inspect(t, other, key)
		if len(info.Holders) != 1 || holdCount(info, newer.Token()) != 1 || info.Fence != newer.Fence() {
			t.Fatalf("after the revoked hold's release: %+v; want the newer hold (fence %d)", info, newer.Fence())
		}
	})
}

// TestRevokeSentTwice: a revocation whose reply is lost, and which the
// client (go-redis at its defaults) sends again, revokes once: the waiter
// granted the lock by the first run keeps it, and the key has one audit
// record.
func TestRevokeSentTwice(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		p := faultproxy.Start(t, b.Addr)
		t.Cleanup(p.Close)
		op := lockerOn(t, redis.NewClient(&redis.Options{Addr: p.Addr}), prefix, Options{})
		holderEng := newLocker(t, b, prefix, Options{})
		waiterEng := newLocker(t, b, prefix, Options{})
		ctx := context.Background()
		key := mustKey(t, "twice", "1")
		if err := op.run.load(ctx, revokeScript); err != nil {
			t.Fatal(err)
		}
		holder, err := holderEng.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Release(ctx)
		got, errc := acquireAsync(waiterEng, key, 10*time.Second)
		eventually(t, 5*time.Second, "waiter queued", func() bool { return len(inspect(t, op, key).Waiters) == 1 })
		p.LoseReplyTo([]byte(op.run.sha(revokeScript)), 1)
		rev, err := op.Revoke(ctx, key, "sent twice")
		if err != nil {
			t.Fatal(err)
		}
		if p.LostReplies() != 1 {
			t.Fatalf("%d replies lost, want 1: the fault did not happen", p.LostReplies())
		}
		if rev.Fence != holder.Fence() || rev.Owner != operate.OwnerDigest(holder.Token()) {
			t.Errorf("revocation %+v; want the first holder's (fence %d)", rev, holder.Fence())
		}
		w := awaitLease(t, got, errc, 5*time.Second, "the waiter after the revocation")
		defer w.Release(ctx)
		info := inspect(t, op, key)
		if holdCount(info, w.Token()) != 1 || len(info.Audit) != 1 {
			t.Fatalf("after a revocation sent twice: %+v; want the waiter's hold and one audit record", info)
		}
		if err := w.Context().Err(); err != nil {
			t.Fatalf("the waiter's lease was revoked too: %v", context.Cause(w.Context()))
		}
	})
}

// TestInspect: Inspect shows a hold re-entered from a second Engine (one
// owner, count 2, both Engines, since the grant by the server's clock)
// and three waiters in arrival order with their Engines and deadlines; no
// owner token is in its JSON, neither the holder's nor the waiters'.
func TestInspect(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		a := newLocker(t, b, prefix, Options{})
		bl := newLocker(t, b, prefix, Options{})
		c := newLocker(t, b, prefix, Options{})
		d := newLocker(t, b, prefix, Options{})
		ctx := context.Background()
		key := mustKey(t, "inspect", "1")

		if info := inspect(t, a, key); info.Key != key.String() || (len(info.Holders) > 0) || len(info.Waiters) != 0 || info.TTL != 0 || info.Fence != 0 {
			t.Fatalf("a key never locked: %+v", info)
		}
		before := time.Now()
		outer, err := a.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		after := time.Now()
		inner, err := bl.Acquire(enginetest.WithToken(ctx, outer.Token()), key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}

		type queued struct {
			e    *Engine
			wait time.Duration
			at   time.Time
			got  <-chan *lifecycle.Lease
			errc <-chan error
		}
		ws := []*queued{{e: c, wait: 20 * time.Second}, {e: d, wait: 30 * time.Second}, {e: c, wait: 40 * time.Second}}
		for i, w := range ws {
			w.at = time.Now()
			w.got, w.errc = acquireAsync(w.e, key, w.wait)
			eventually(t, 5*time.Second, "waiter queued", func() bool { return len(inspect(t, a, key).Waiters) == i+1 })
		}

		info := inspect(t, a, key)
		if len(info.Holders) != 1 {
			t.Fatalf("holders %+v, want one", info.Holders)
		}
		h := info.Holders[0]
		if h.Owner != operate.OwnerDigest(outer.Token()) || h.Count != 2 || !slices.Equal(h.Instances, []string{a.id, bl.id}) {
			t.Errorf("holder %+v; want owner %s, count 2, instances %s %s", h, operate.OwnerDigest(outer.Token()), a.id, bl.id)
		}
		if h.Since.IsZero() || h.Since.Before(before.Add(-time.Second)) || h.Since.After(after.Add(time.Second)) {
			t.Errorf("holder since %v, want between %v and %v (same host's clock, ±1s)", h.Since, before, after)
		}
		if info.Fence != outer.Fence() || info.LastFence < info.Fence || info.TTL <= 0 || info.TTL > a.opt.TTL {
			t.Errorf("fence %d (lease %d), last fence %d, TTL %v", info.Fence, outer.Fence(), info.LastFence, info.TTL)
		}
		if len(info.Waiters) != len(ws) {
			t.Fatalf("waiters %+v, want %d", info.Waiters, len(ws))
		}
		for i, w := range info.Waiters {
			q := ws[i]
			if w.Instance != q.e.id {
				t.Errorf("waiter %d on %s, want %s", i, w.Instance, q.e.id)
			}
			if !near(w.Deadline, q.at.Add(q.wait), time.Second) {
				t.Errorf("waiter %d deadline %v, want about %v", i, w.Deadline, q.at.Add(q.wait))
			}
			if !near(w.Since, q.at, time.Second) || i > 0 && w.Since.Before(info.Waiters[i-1].Since) {
				t.Errorf("waiter %d since %v (queued at %v), after waiter %d's", i, w.Since, q.at, i-1)
			}
		}
		if len(info.Audit) != 0 {
			t.Errorf("audit %+v of a key never revoked", info.Audit)
		}

		// The waiters' tokens are known once they hold the lock.
		tokens := []string{outer.Token()}
		if err := inner.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if n := holdCount(inspect(t, a, key), outer.Token()); n != 1 {
			t.Errorf("count %d after the re-entry's release, want 1", n)
		}
		if err := outer.Release(ctx); err != nil {
			t.Fatal(err)
		}
		for _, q := range ws {
			ls := awaitLease(t, q.got, q.errc, 5*time.Second, "a waiter, in turn")
			tokens = append(tokens, ls.Token())
			if err := ls.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		noTokens(t, info, tokens...)
		if info := inspect(t, a, key); (len(info.Holders) > 0) || len(info.Waiters) != 0 || info.LastFence == 0 {
			t.Errorf("after every release: %+v; want free, with its last fence", info)
		}
	})
}

// TestList: List finds the held locks under a prefix, in key order, with
// limit and more; a '*' in the prefix is a character, not a pattern; free
// keys, keys whose name is not a lock's and a lock's other keys are not
// listed; no owner token is in its JSON.
func TestList(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		l := newLocker(t, b, prefix, Options{})
		ctx := context.Background()
		held := map[string]*lifecycle.Lease{}
		for _, parts := range [][]string{{"productID", "1"}, {"productID", "2"}, {"productID", "10"}, {"order", "7"}, {"w*d", "1"}, {"wxd", "1"}} {
			k := mustKey(t, parts...)
			ls, err := l.Acquire(ctx, k, lifecycle.Policy{Wait: lockcore.FailFast})
			if err != nil {
				t.Fatal(err)
			}
			defer ls.Release(ctx)
			held[k.String()] = ls
		}
		// A lock taken and released: its fencing counter stays, unlisted.
		free := mustKey(t, "productID", "3")
		ls, err := l.Acquire(ctx, free, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		_ = ls.Release(ctx)
		// Keys under the engine's prefix that are not locks.
		rdb := b.Universal(t)
		for _, k := range []string{prefix + "{productID:bad%zz}", prefix + "{productID:9}:x", prefix + "productID:8"} {
			if err := rdb.Set(ctx, k, "x", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		}
		var tokens []string
		for _, ls := range held {
			tokens = append(tokens, ls.Token())
		}

		keysOf := func(infos []lockcore.Info) []string {
			var ks []string
			for _, in := range infos {
				ks = append(ks, in.Key)
			}
			return ks
		}
		for _, c := range []struct {
			prefix string
			limit  int
			want   []string
			more   bool
		}{
			{"productID:", 0, []string{"productID:1", "productID:10", "productID:2"}, false},
			{"productID:", 3, []string{"productID:1", "productID:10", "productID:2"}, false},
			{"productID:", 2, []string{"productID:1", "productID:10"}, true},
			{"productID:1", 0, []string{"productID:1", "productID:10"}, false},
			{"", 0, []string{"order:7", "productID:1", "productID:10", "productID:2", "w*d:1", "wxd:1"}, false},
			{"", 1, []string{"order:7"}, true},
			{"w*", 0, []string{"w*d:1"}, false},
			{"none:", 0, nil, false},
		} {
			infos, more, err := l.List(ctx, c.prefix, c.limit)
			if err != nil {
				t.Fatal(err)
			}
			if got := keysOf(infos); !slices.Equal(got, c.want) || more != c.more {
				t.Errorf("List(%q, %d) = %q, more %v; want %q, more %v", c.prefix, c.limit, got, more, c.want, c.more)
			}
			for _, in := range infos {
				ls := held[in.Key]
				if ls == nil || holdCount(in, ls.Token()) != 1 || in.Fence != ls.Fence() || in.TTL <= 0 {
					t.Errorf("listed %+v", in)
				}
			}
			noTokens(t, infos, tokens...)
		}
	})
}

// TestOperatorOnCluster: on a cluster (a ClusterClient, whose keys spread
// over every slot), List finds every held lock by scanning each master,
// and Revoke, whose script declares every key it touches (a real Redis 7
// cluster refuses one that does not), revokes and hands over.
func TestOperatorOnCluster(t *testing.T) {
	for _, b := range redistest.ClusterBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{b.Addr}})
			t.Cleanup(func() { _ = rdb.Close() })
			prefix := redistest.Prefix(t)
			l := lockerOn(t, rdb, prefix, Options{})
			other := lockerOn(t, rdb, prefix, Options{})
			var want []string
			var leases []*lifecycle.Lease
			for i := range 40 {
				k := mustKey(t, "sku", fmt.Sprint(i))
				ls, err := l.Acquire(ctx, k, lifecycle.Policy{Wait: lockcore.FailFast})
				if err != nil {
					t.Fatal(err)
				}
				defer ls.Release(ctx)
				want = append(want, k.String())
				leases = append(leases, ls)
			}
			slices.Sort(want)
			masters := 0
			_ = rdb.ForEachMaster(ctx, func(context.Context, *redis.Client) error { masters++; return nil })
			infos, more, err := other.List(ctx, "sku:", 0)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, in := range infos {
				got = append(got, in.Key)
			}
			if !slices.Equal(got, want) || more {
				t.Fatalf("List on a cluster of %d master(s) = %q (more %v), want %q", masters, got, more, want)
			}

			key := mustKey(t, "sku", "7")
			w, errc := acquireAsync(other, key, 10*time.Second)
			eventually(t, 5*time.Second, "waiter queued", func() bool { return len(inspect(t, l, key).Waiters) == 1 })
			rev, err := other.Revoke(ctx, key, "cluster")
			if err != nil {
				t.Fatal(err)
			}
			ls := awaitLease(t, w, errc, 5*time.Second, "the waiter after the revocation")
			defer ls.Release(ctx)
			if ls.Fence() <= rev.NewFence {
				t.Errorf("waiter's fence %d not above NewFence %d", ls.Fence(), rev.NewFence)
			}
			select {
			case <-leases[7].Context().Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the revoked lease is live")
			}
			if info := inspect(t, l, key); len(info.Audit) != 1 || info.Audit[0].Reason != "cluster" {
				t.Errorf("audit %+v", info.Audit)
			}
		})
	}
}

// TestOOMRevoke: at maxmemory, where a fresh lock cannot be taken, an
// operator can still revoke one (the script is flagged allow-oom), and the
// holder learns it.
func TestOOMRevoke(t *testing.T) {
	srv := redistest.OwnReal(t)
	if srv == nil {
		return
	}
	for _, variant := range []string{"shebang", "plain"} {
		t.Run(variant, func(t *testing.T) {
			ctx := context.Background()
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
			t.Cleanup(func() { _ = rdb.Close() })
			admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
			t.Cleanup(func() { _ = admin.Close() })
			l := lockerOn(t, rdb, redistest.Prefix(t), Options{TTL: 600 * time.Millisecond})
			if variant == "plain" {
				l.run.plain.Store(true)
			}
			key := mustKey(t, "oom", variant)
			ls, err := l.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
			if err != nil {
				t.Fatal(err)
			}
			atMaxMemory(t, admin)
			if _, err := l.Revoke(ctx, key, "at maxmemory"); err != nil {
				t.Fatalf("revoke at maxmemory: %v", err)
			}
			select {
			case <-ls.Context().Done():
			case <-time.After(time.Second):
				t.Fatal("the revoked lease is live")
			}
			if cause := context.Cause(ls.Context()); !errors.Is(cause, lockcore.ErrRevoked) {
				t.Fatalf("cause %v, want ErrRevoked", cause)
			}
		})
	}
}

// TestParseKeyRoundTrip: List reads keys back with lockcore.ParseKey,
// which takes exactly what NewKey writes.
func TestParseKeyRoundTrip(t *testing.T) {
	for _, parts := range [][]string{{"productID", "42"}, {"a:b", "c"}, {"100%", "{x}", "a b", "\x00\xff"}, {"w*d?[x]\\"},
		{strings.Repeat(":", keylimit.PartLen)}, {"1", "2", "3", "4", "5", "6", "7", "8"}} {
		k := mustKey(t, parts...)
		got, err := lockcore.ParseKey(k.String())
		if err != nil || got != k {
			t.Errorf("ParseKey(%q) = %q, %v; want the key back", k, got, err)
		}
	}
	for _, s := range []string{"", "a::b", ":a", "a:", "a%3a", "a%41", "a b", "a{b", "a%", "a%4", "a%G0",
		"1:2:3:4:5:6:7:8:9", strings.Repeat("x", keylimit.PartLen+1), strings.Repeat("%3A", keylimit.PartLen+1)} {
		if k, err := lockcore.ParseKey(s); !errors.Is(err, lockcore.ErrInvalidKey) {
			t.Errorf("ParseKey(%q) = %q, %v; want ErrInvalidKey", s, k, err)
		}
	}
}

// TestInspectSinceOnTheFastPath: a free lock whose fencing counter exists
// is taken without asking Redis for the time; Inspect then reads when it
// was taken from the attempt id, by the taking engine's clock.
func TestInspectSinceOnTheFastPath(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		l := newLocker(t, b, redistest.Prefix(t), Options{})
		ctx := context.Background()
		key := mustKey(t, "since", "1")
		first, err := l.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast}) // seeds the fencing counter
		if err != nil {
			t.Fatal(err)
		}
		if err := first.Release(ctx); err != nil {
			t.Fatal(err)
		}
		before := time.Now()
		ls, err := l.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
		if err != nil {
			t.Fatal(err)
		}
		after := time.Now()
		defer ls.Release(ctx)
		info := inspect(t, l, key)
		if len(info.Holders) != 1 {
			t.Fatalf("holders %+v, want 1", info.Holders)
		}
		if s := info.Holders[0].Since; s.Before(before.Truncate(time.Microsecond)) || s.After(after) {
			t.Errorf("since %v, want between %v and %v", s, before, after)
		}
	})
}

func TestEntryStart(t *testing.T) {
	now := time.UnixMicro(1_790_000_000_123_456)
	l := &Engine{id: "0123456789abcdef"}
	id := l.nextID(now)
	if got := entryStart(id); got != now.UnixMicro() {
		t.Errorf("entryStart(%q) = %d, want %d", id, got, now.UnixMicro())
	}
	for _, id := range []string{"", "abc", "abc.1", "abc.1.-5", "abc.1.zz!"} {
		if got := entryStart(id); got != 0 {
			t.Errorf("entryStart(%q) = %d, want 0", id, got)
		}
	}
}

// TestRevokedAfterCallerLeftSaysRevoked: a request's context ends (its
// deadline) while its lease is still held, and an operator then revokes
// the hold. The lease's context already ended with the request's cause,
// but its Err and its Release must still say why the hold was lost,
// ErrRevoked, not a bare ErrLockLost.
func TestRevokedAfterCallerLeftSaysRevoked(t *testing.T) {
	t.Parallel() // it mostly waits on timers; its keys are its own
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		for _, k := range healKinds {
			t.Run(k.name, func(t *testing.T) {
				l := lockerOn(t, k.client(t, b.Addr), redistest.Prefix(t), Options{})
				key := mustKey(t, "revoke", "after-deadline")
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				defer cancel()
				ls, err := l.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
				if err != nil {
					t.Fatal(err)
				}
				<-ls.Context().Done()
				if !errors.Is(context.Cause(ls.Context()), context.DeadlineExceeded) {
					t.Fatalf("the lease's context ended with %v, want the request's deadline", context.Cause(ls.Context()))
				}
				if _, err := l.Revoke(context.Background(), key, "after the request's deadline"); err != nil {
					t.Fatalf("Revoke: %v", err)
				}
				eventually(t, 2*time.Second, "the lease's Err saying ErrRevoked", func() bool {
					return errors.Is(ls.Err(), lockcore.ErrRevoked)
				})
				if err := ls.Release(context.Background()); !errors.Is(err, lockcore.ErrRevoked) {
					t.Fatalf("Release: %v, want ErrRevoked", err)
				}
			})
		}
	})
}
