package quorumengine

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/faultproxy"
	"github.com/routelock/lock/lockcore"
)

// defectEnv names, in a child process of TestDefectsCaught, the defect
// planted in every engine the tests make (defects_test.go).
const defectEnv = "QUORUMENGINE_DEFECT"

// planted returns the engine's defect: the one defectEnv names in a
// child of TestDefectsCaught, "" otherwise.
func planted() string { return os.Getenv(defectEnv) }

// through returns a client of the master that c reaches, through a
// fault proxy, and the proxy. The client bounds its calls by their
// contexts' deadlines (ContextTimeoutEnabled), so that the calls the
// faults leave hanging end with them, as the engine's tests end, and not
// seconds later.
func through(t *testing.T, c redis.UniversalClient) (redis.UniversalClient, *faultproxy.Proxy) {
	t.Helper()
	p := faultproxy.Start(t, c.(*redis.Client).Options().Addr)
	pc := redis.NewClient(&redis.Options{Addr: p.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = pc.Close() })
	return pc, p
}

// within polls cond until it holds, at most for bound, and reports
// whether it did.
func within(bound time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond) // a bounded poll of a state
	}
	return true
}

// TestFailedQuorumReleasesEverywhere: an attempt that wins one master of
// three, finds another held by another owner, and hears nothing in time
// from the third (where its grant may land late, or not at all) gives up
// its grants on every master, long before they would expire.
func TestFailedQuorumReleasesEverywhere(t *testing.T) {
	cs := masters(t, 3)
	slow, p := through(t, cs[2])
	e := newEngine(t, []redis.UniversalClient{cs[0], cs[1], slow}, Options{Prefix: "failed:", TTL: 20 * time.Second, Timeout: 100 * time.Millisecond})
	k, _ := lockcore.NewKey("productID", "1")
	ctx := context.Background()
	lk := e.lockKey(k.String())
	if err := cs[1].HSet(ctx, lk, "t", "another owner", "f", 1).Err(); err != nil {
		t.Fatal(err)
	}
	cs[1].PExpire(ctx, lk, 20*time.Second)
	if err := slow.Ping(ctx).Err(); err != nil { // a connection before the latency
		t.Fatal(err)
	}
	p.SetLatency(300 * time.Millisecond)
	start := time.Now()
	_, err := e.Take(ctx, lockcore.Request{Key: k, Token: "the attempt's token", Wait: lockcore.FailFast})
	var ce *lockcore.ContentionError
	if !errors.As(err, &ce) {
		t.Fatalf("an attempt that won one master of three: %v, want a ContentionError", err)
	}
	// The late grant lands on the slow master about 300ms after it was
	// sent, and the withdrawal after it.
	gone := func() bool {
		return time.Since(start) > 800*time.Millisecond &&
			cs[0].Exists(ctx, lk).Val() == 0 && cs[2].Exists(ctx, lk).Val() == 0
	}
	if !within(5*time.Second, gone) {
		t.Fatalf("the failed attempt's grants stay: on the master that granted %d, on the slow one %d (pttl %v, %v)",
			cs[0].Exists(ctx, lk).Val(), cs[2].Exists(ctx, lk).Val(), cs[0].PTTL(ctx, lk).Val(), cs[2].PTTL(ctx, lk).Val())
	}
	if tok := cs[1].HGet(ctx, lk, "t").Val(); tok != "another owner" {
		t.Fatalf("the other owner's hold was touched: holder %q", tok)
	}
	p.SetLatency(0)
}

// TestFencesRiseAcrossQuorums: a hold's fence, the greatest of its
// quorum's counters, is raised on the masters that confirm it, so that
// the next hold, on a quorum without the master that set it, still gets
// a greater one.
func TestFencesRiseAcrossQuorums(t *testing.T) {
	t.Parallel() // its faults are its own proxies'; it waits out timeouts
	cs := masters(t, 3)
	// The first engine hears master 0 first, the second none of it.
	pb, lb := through(t, cs[1])
	pc, lc := through(t, cs[2])
	pa, down := through(t, cs[0])
	lb.SetLatency(50 * time.Millisecond)
	lc.SetLatency(50 * time.Millisecond)
	if err := down.Down(true); err != nil {
		t.Fatal(err)
	}
	o := Options{Prefix: "fences:", Timeout: 2 * time.Second, TTL: 10 * time.Second}
	e1 := newEngine(t, []redis.UniversalClient{cs[0], pb, pc}, o)
	e2 := newEngine(t, []redis.UniversalClient{pa, cs[1], cs[2]}, o)
	k, _ := lockcore.NewKey("productID", "2")
	ctx := context.Background()
	// Master 0's counter far ahead (a master whose clock seeded it later).
	if err := cs[0].Set(ctx, e1.countKey(k.String()), int64(8e15), 0).Err(); err != nil {
		t.Fatal(err)
	}
	first, err := e1.Take(ctx, lockcore.Request{Key: k, Token: "first", Wait: lockcore.FailFast})
	if err != nil {
		t.Fatal(err)
	}
	if first.Fence() <= 8e15 {
		t.Fatalf("the first hold's fence %d is not the greatest of its quorum's", first.Fence())
	}
	if err := first.Release(ctx, nil); err != nil {
		t.Fatal(err)
	}
	// (The release returned once a quorum had it: the slow master may
	// hold the first a moment longer.)
	second, err := e2.Take(ctx, lockcore.Request{Key: k, Token: "second", Wait: 5 * time.Second})
	if err != nil {
		t.Fatalf("the second hold on two masters of three: %v", err)
	}
	defer second.Release(ctx, nil)
	t.Logf("fences %d, then %d", first.Fence(), second.Fence())
	if second.Fence() <= first.Fence() {
		t.Fatalf("fence %d after fence %d, on a quorum without the master that set the first", second.Fence(), first.Fence())
	}
	lb.SetLatency(0)
	lc.SetLatency(0)
}

// TestLostByClockFirst: a holder cut off from every master is told its
// lease is lost, by its own clock, before the masters let its hold expire
// and another engine takes the key; that one's fence is greater.
func TestLostByClockFirst(t *testing.T) {
	cs := masters(t, 3)
	var cut []redis.UniversalClient
	var proxies []*faultproxy.Proxy
	for _, c := range cs {
		pc, p := through(t, c)
		cut, proxies = append(cut, pc), append(proxies, p)
	}
	const ttl = time.Second
	ea := newEngine(t, cut, Options{Prefix: "clock:", TTL: ttl, Timeout: 100 * time.Millisecond})
	eb := newEngine(t, cs, Options{Prefix: "clock:", TTL: ttl, Timeout: 100 * time.Millisecond})
	a, b := lock.FromEngine(ea), lock.FromEngine(eb)
	k, _ := lockcore.NewKey("productID", "3")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	held, err := a.Acquire(ctx, k, lock.FailFast())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range proxies {
		p.Blackhole(true)
	}
	var lostAt atomic.Int64
	go func() {
		<-held.Context().Done()
		lostAt.Store(time.Now().UnixNano())
	}()
	next, err := b.Acquire(ctx, k, lock.Wait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	took := time.Now().UnixNano()
	defer next.Release(ctx)
	if l := lostAt.Load(); l == 0 || took-l < int64(50*time.Millisecond) {
		t.Fatalf("the cut-off holder was told %v before the next holder took the key, want at least 50ms (lost at %d)", time.Duration(took-l), l)
	}
	if cause := context.Cause(held.Context()); !errors.Is(cause, lockcore.ErrLockLost) {
		t.Fatalf("the cut-off holder's cause: %v, want ErrLockLost", cause)
	}
	if next.Fence() <= held.Fence() {
		t.Fatalf("the next holder's fence %d is not above the lost one's %d", next.Fence(), held.Fence())
	}
	for _, p := range proxies {
		p.Heal()
	}
	_ = held.Release(ctx)
}
