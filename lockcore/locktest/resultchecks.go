package locktest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/lockcore"
)

// keepFor is how long the results checks keep their results.
const keepFor = time.Minute

// needResults: the checks of kept results (lockcore.Results).
func needResults(p lockcore.Promises) bool { return p.Results }

// results returns e as a lockcore.Results, failing the check when it is
// none though it promises to keep results.
func (r *rig) results(e lockcore.Engine) lockcore.Results {
	r.t.Helper()
	rs, ok := e.(lockcore.Results)
	if !ok {
		r.t.Fatalf("%T promises Results and is no lockcore.Results", e)
	}
	return rs
}

// take takes k on e as a Locker would, failing fast, without a lease: for
// the checks that give a hold to Results.Keep themselves.
func (r *rig) take(e lockcore.Engine, k lockcore.Key) lockcore.Hold {
	r.t.Helper()
	h, err := e.Take(r.ctx, lockcore.Request{Key: k, Token: lifecycle.NewToken(), Wait: lockcore.FailFast})
	if err != nil {
		r.t.Fatalf("Take(%v): %v", k, err)
	}
	return h
}

// wantResult fails the check unless rs has res for k (none for nil).
func (r *rig) wantResult(rs lockcore.Results, k lockcore.Key, res []byte, what string) {
	r.t.Helper()
	got, ok, err := rs.Result(r.ctx, k)
	switch {
	case err != nil:
		r.t.Fatalf("%s: Result(%v): %v", what, k, err)
	case res == nil && ok:
		r.t.Fatalf("%s: Result(%v) = %d bytes %q, want none", what, k, len(got), got)
	case res != nil && (!ok || !bytes.Equal(got, res)):
		r.t.Fatalf("%s: Result(%v) = %d bytes %.40q (found %v), want the %d bytes kept, %.40q", what, k, len(got), got, ok, len(res), res)
	}
}

// binary is a result that a text store would mangle: line feeds, zero
// bytes, bytes that are no UTF-8.
func binary(tag string) []byte {
	b := []byte(tag + "\n")
	for i := range 1024 {
		b = append(b, byte(i), 0, '\n', 0xff)
	}
	return append(b, "\x00end"...)
}

// checkResults: a result kept by a live lease (lifecycle.Keep) is there,
// byte for byte, on every engine of the backend, and the key is free at
// once: a fresh acquisition failing fast gets it. A Keep sent again with
// the same hold, as a client re-sends it after a lost reply, reports
// success and stores nothing new.
func checkResults(r *rig) {
	rsA, rsB := r.results(r.ea), r.results(r.eb)
	k := r.key("k")
	r.wantResult(rsB, k, nil, "before any Keep")
	ls := r.acquire(r.a, r.ctx, k, failFast)
	res := binary("k")
	if err := lifecycle.Keep(r.ctx, ls, res, keepFor); err != nil {
		r.t.Fatalf("Keep of a live lease: %v", err)
	}
	next, err := r.b.Acquire(r.ctx, k, failFast)
	if err != nil {
		r.t.Fatalf("a fresh acquisition just after Keep returned: %v, want the key free", err)
	}
	r.release(next)
	r.wantResult(rsB, k, res, "kept by a live lease")
	r.wantResult(rsA, k, res, "kept by a live lease, read where it was kept")

	again := r.key("again")
	h := r.take(r.ea, again)
	first := binary("again")
	if err := rsA.Keep(r.ctx, again, h, first, keepFor); err != nil {
		r.t.Fatalf("Keep of a live hold: %v", err)
	}
	if err := rsA.Keep(r.ctx, again, h, []byte("sent again"), keepFor); err != nil {
		r.t.Fatalf("the same Keep sent again: %v, want success", err)
	}
	r.wantResult(rsB, again, first, "after the same Keep sent again")
}

// checkResultsLoss: a hold that lost its key keeps nothing, and Keep says
// so with an error matching ErrLockLost: a lease revoked (Operator.Revoke)
// before lifecycle.Keep, and holds given to Results.Keep after they were
// revoked, one whose key stayed free and one whose key another owner took.
func checkResultsLoss(r *rig) {
	rs := r.results(r.eb)
	op := r.eb.(lockcore.Operator)
	k := r.key("k")
	ls := r.acquire(r.a, r.ctx, k, failFast)
	if _, err := op.Revoke(r.ctx, k, "locktest: results"); err != nil {
		r.t.Fatalf("Revoke: %v", err)
	}
	if err := lifecycle.Keep(r.ctx, ls, []byte("late"), keepFor); !errors.Is(err, lockcore.ErrLockLost) {
		r.t.Fatalf("Keep of a revoked lease: %v, want ErrLockLost", err)
	}
	r.wantResult(rs, k, nil, "after a revoked lease's Keep")

	free := r.key("free")
	h := r.take(r.ea, free)
	if _, err := op.Revoke(r.ctx, free, "locktest: results"); err != nil {
		r.t.Fatalf("Revoke: %v", err)
	}
	if err := r.results(r.ea).Keep(r.ctx, free, h, []byte("late"), keepFor); !errors.Is(err, lockcore.ErrLockLost) {
		r.t.Fatalf("Keep of a hold revoked, its key free since: %v, want ErrLockLost", err)
	}
	r.wantResult(rs, free, nil, "after a revoked hold's Keep, its key free")

	taken := r.key("taken")
	h = r.take(r.ea, taken)
	if _, err := op.Revoke(r.ctx, taken, "locktest: results"); err != nil {
		r.t.Fatalf("Revoke: %v", err)
	}
	other := r.wantFreed(r.b, taken, "revoked")
	if err := r.results(r.ea).Keep(r.ctx, taken, h, []byte("late"), keepFor); !errors.Is(err, lockcore.ErrLockLost) {
		r.t.Fatalf("Keep of a hold revoked, its key held by another owner since: %v, want ErrLockLost", err)
	}
	r.wantResult(rs, taken, nil, "after a revoked hold's Keep")
	if err := other.Err(); err != nil {
		r.t.Fatalf("the new owner's lease after a revoked hold's Keep: %v", err)
	}
	r.release(other)
	r.wantResult(rs, taken, nil, "after the new owner's release")
}

// checkResultsOnce: 16 goroutines on both engines, 20 rounds each, which
// they start together, in every round on one of 3 keys of that round, run
// each key's work once:
// each asks for the key's result, and when there is none takes the key
// (waiting), asks again, and when there is still none runs the work and
// keeps its result (lifecycle.Keep). Every key ran exactly once and has
// its runner's result: no holder could take a key between its runner's
// release and its store.
func checkResultsOnce(r *rig) {
	const workers, rounds, keys = 16, 20, 3
	lockers, rs := []lifecycle.Locker{r.a, r.b}, []lockcore.Results{r.results(r.ea), r.results(r.eb)}
	type run struct {
		k    lockcore.Key
		n    atomic.Int64 // runs of the work, counted as they start
		by   atomic.Value // the result its last run kept
		seen atomic.Int64 // results found, before or after taking the key
	}
	runs := make([][keys]*run, rounds)
	for i := range runs {
		for j := range keys {
			runs[i][j] = &run{k: r.key(fmt.Sprintf("r%d-%d", i, j))}
		}
	}
	var (
		wg     sync.WaitGroup
		start  [rounds]sync.WaitGroup // a round's workers start it together
		failed atomic.Bool
	)
	for i := range start {
		start[i].Add(workers)
	}
	for w := range workers {
		e, rs := lockers[w%2], rs[w%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				start[i].Done()
				start[i].Wait()
				if failed.Load() {
					continue // to the end, past the others' barriers
				}
				u := runs[i][(w+i)%keys]
				err := once(r.ctx, e, rs, u.k, func() []byte {
					u.n.Add(1)
					runtime.Gosched() // a while inside, for another runner to come in
					res := fmt.Appendf(nil, "worker %d\n\x00", w)
					u.by.Store(res)
					return res
				}, func() { u.seen.Add(1) })
				if err != nil {
					failed.Store(true)
					r.t.Errorf("worker %d, round %d: %v", w, i, err)
				}
			}
		}()
	}
	wg.Wait()
	if r.t.Failed() {
		return
	}
	var twice, seen int
	for i := range runs {
		for _, u := range runs[i] {
			seen += int(u.seen.Load())
			if n := u.n.Load(); n != 1 {
				twice++
				r.t.Errorf("%v ran %d times, want once", u.k, n)
				continue
			}
			res, _ := u.by.Load().([]byte)
			r.wantResult(rs[0], u.k, res, "after the rounds")
		}
	}
	if twice == 0 && seen != workers*rounds-rounds*keys {
		r.t.Errorf("results found %d times, want %d: one per request that did not run", seen, workers*rounds-rounds*keys)
	}
}

// once is one request of checkResultsOnce on k: the result of k if there
// is one (then found is called), else work's, run under the lock and kept
// with its release.
func once(ctx context.Context, e lifecycle.Locker, rs lockcore.Results, k lockcore.Key, work func() []byte, found func()) error {
	if _, ok, err := rs.Result(ctx, k); err != nil || ok {
		if ok {
			found()
		}
		return err
	}
	ls, err := e.Acquire(ctx, k, lifecycle.Policy{Wait: checkBound})
	if err != nil {
		return err
	}
	if _, ok, err := rs.Result(ctx, k); err != nil || ok {
		if ok {
			found()
		}
		return errors.Join(err, ls.Release(context.Background()))
	}
	return lifecycle.Keep(ctx, ls, work(), keepFor)
}

// checkResultsStored: StoredResults lists the kept results under a prefix
// in key order, with their sizes and expiry, up to a limit; DropResult
// deletes one, after which it is none, and says whether there was one; a
// result expires when it was kept for.
func checkResultsStored(r *rig) {
	rs := r.results(r.ea)
	names := []string{"s1", "s2", "s3"}
	start := time.Now()
	for i, n := range names {
		ls := r.acquire([]lifecycle.Locker{r.a, r.b}[i%2], r.ctx, r.key(n), failFast)
		if err := lifecycle.Keep(r.ctx, ls, bytes.Repeat([]byte{0, '\n'}, 100*(i+1)), keepFor); err != nil {
			r.t.Fatalf("Keep: %v", err)
		}
	}
	prefix := r.key("s").String() // the keys s1, s2 and s3 only
	list := func(limit int, want ...string) {
		r.t.Helper()
		got, more, err := rs.StoredResults(r.ctx, prefix, limit)
		if err != nil {
			r.t.Fatalf("StoredResults(%q, %d): %v", prefix, limit, err)
		}
		if len(got) != len(want) || more != (limit < 3 && len(want) == limit) {
			r.t.Fatalf("StoredResults(%q, %d): %+v, more %v; want %v", prefix, limit, got, more, want)
		}
		for i, s := range got {
			n := slices.Index(names, want[i])
			if s.Key != r.key(want[i]) || s.Size != int64(200*(n+1)) ||
				s.Expires.Before(start.Add(keepFor-awaitBound)) || s.Expires.After(time.Now().Add(keepFor)) {
				r.t.Fatalf("StoredResults(%q, %d): %d: %+v; want %v, of %d bytes, expiring %v after it was kept", prefix, limit, i, s, r.key(want[i]), 200*(n+1), keepFor)
			}
		}
	}
	list(10, names...)
	list(2, "s1", "s2")
	if ok, err := rs.DropResult(r.ctx, r.key("s2")); !ok || err != nil {
		r.t.Fatalf("DropResult of a kept result: %v, %v; want true", ok, err)
	}
	if ok, err := rs.DropResult(r.ctx, r.key("s2")); ok || err != nil {
		r.t.Fatalf("DropResult again: %v, %v; want false", ok, err)
	}
	r.wantResult(r.results(r.eb), r.key("s2"), nil, "dropped")
	list(10, "s1", "s3")

	short := r.key("short")
	ls := r.acquire(r.b, r.ctx, short, failFast)
	if err := lifecycle.Keep(r.ctx, ls, []byte("short"), 100*time.Millisecond); err != nil {
		r.t.Fatalf("Keep: %v", err)
	}
	var ok bool
	if !r.eventually(func() bool { _, ok, _ = rs.Result(r.ctx, short); return !ok }) {
		r.t.Fatalf("a result kept for 100ms still there after %v", awaitBound)
	}
}

// checkResultsInLine: acquisitions that want a result (Request.Result),
// 3 on each engine, waiting in line behind a holder, each get the result
// it keeps, as a *lockcore.ResultFound, and none takes the key; the key
// is free once the holder kept it (a plain acquisition failing fast takes
// it, with a stored result). One that wants the result after it was kept
// gets it at once, failing fast or not, and takes nothing.
func checkResultsInLine(r *rig) {
	const waiters = 6
	rs := r.results(r.ea)
	k := r.key("k")
	h := r.take(r.ea, k)
	type got struct {
		h   lockcore.Hold
		err error
	}
	gots := make(chan got, waiters)
	for i := range waiters {
		e := []lockcore.Engine{r.ea, r.eb}[i%2]
		go func() {
			h, err := e.Take(r.ctx, lockcore.Request{Key: k, Token: lifecycle.NewToken(), Wait: checkBound, Result: true})
			gots <- got{h, err}
		}()
	}
	r.queued(k, waiters)
	res := binary("in line")
	if err := rs.Keep(r.ctx, k, h, res, keepFor); err != nil {
		r.t.Fatalf("Keep with %d waiting: %v", waiters, err)
	}
	for range waiters {
		g := <-gots
		var found *lockcore.ResultFound
		switch {
		case g.h != nil:
			_ = g.h.Release(context.Background(), nil)
			r.t.Fatalf("an acquisition that wants the result, in line as it was kept, took the key (fence %d), want a *lockcore.ResultFound", g.h.Fence())
		case !errors.As(g.err, &found):
			r.t.Fatalf("an acquisition that wants the result, in line as it was kept: %v, want a *lockcore.ResultFound", g.err)
		case !bytes.Equal(found.Result, res):
			r.t.Fatalf("an acquisition in line found %d bytes %.40q, want the %d bytes kept", len(found.Result), found.Result, len(res))
		}
	}
	for _, e := range []lockcore.Engine{r.ea, r.eb} {
		for _, wait := range []time.Duration{lockcore.FailFast, checkBound} {
			h, err := e.Take(r.ctx, lockcore.Request{Key: k, Token: lifecycle.NewToken(), Wait: wait, Result: true})
			var found *lockcore.ResultFound
			if h != nil {
				_ = h.Release(context.Background(), nil)
			}
			if !errors.As(err, &found) || !bytes.Equal(found.Result, res) {
				r.t.Fatalf("an acquisition that wants the result after it was kept (wait %v): hold %v, error %v, want a *lockcore.ResultFound with the result", wait, h != nil, err)
			}
		}
	}
	plain := r.take(r.eb, k)
	if err := plain.Release(r.ctx, nil); err != nil {
		r.t.Fatalf("Release: %v", err)
	}
	if !r.promised.TokenReentry {
		return
	}

	// A hold that another hold re-entered by its token keeps its result,
	// and the key stays held by the other until it lets go: a waiter in
	// line that wants the result then gets it, not the key.
	k = r.key("reentered")
	tok := lifecycle.NewToken()
	first, err := r.ea.Take(r.ctx, lockcore.Request{Key: k, Token: tok, Wait: lockcore.FailFast})
	if err != nil {
		r.t.Fatalf("Take: %v", err)
	}
	inner, err := r.eb.Take(r.ctx, lockcore.Request{Key: k, Token: lifecycle.NewToken(), Join: []string{tok}, Wait: lockcore.FailFast})
	if err != nil {
		r.t.Fatalf("a re-entry by the holder's token: %v", err)
	}
	go func() {
		h, err := r.ea.Take(r.ctx, lockcore.Request{Key: k, Token: lifecycle.NewToken(), Wait: checkBound, Result: true})
		gots <- got{h, err}
	}()
	r.queued(k, 1)
	res = binary("re-entered")
	if err := rs.Keep(r.ctx, k, first, res, keepFor); err != nil {
		r.t.Fatalf("Keep of a hold another re-entered: %v", err)
	}
	if err := inner.Release(r.ctx, nil); err != nil {
		r.t.Fatalf("the re-entry's Release: %v", err)
	}
	g := <-gots
	found, ok := errors.AsType[*lockcore.ResultFound](g.err)
	if g.h != nil {
		_ = g.h.Release(context.Background(), nil)
	}
	if g.h != nil || !ok || !bytes.Equal(found.Result, res) {
		r.t.Fatalf("a waiter that wants the result, once a re-entry of the hold that kept it let go: hold %v, error %v, want a *lockcore.ResultFound with the result", g.h != nil, g.err)
	}
	r.release(r.wantFreed(r.b, k, "the re-entry let go and the waiter found the result"))
}
