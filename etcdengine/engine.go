// Package etcdengine is a routelock engine on etcd, the consensus store:
// a lock that a failover cannot hand to two holders, for users whose
// correctness cannot rest on Redis's asynchronous replication. Give it to
// lock.FromEngine, which owns the leases of its holds; every route,
// method, policy, status code, owner-token hop and fencing token stays as
// it is.
//
// It lives in a Go module of its own, so that a program that locks on
// Redis does not link etcd's client. A program that imports it, even as
// import _ "github.com/routelock/lock/etcdengine", makes the package-level
// helpers (lock.ByParam, lock.By without lock.SetDefault) lock on the etcd
// that ETCD_ENDPOINTS names (comma-separated client URLs), with the
// default Options; the routelock command of this module
// (github.com/routelock/lock/etcdengine/cmd/routelock) reads it too.
//
// # How it holds a lock
//
// Each process has one etcd lease per TTL (a session), which the engine
// renews itself every third of it with one keep-alive request and judges
// on its own monotonic clock: valid until the keep-alive was sent plus
// the TTL etcd granted, less a tenth. When that passes unrenewed, every
// hold on the session is lost (its Done closes) before etcd can expire
// the lease and give the lock to the next waiter.
//
// An acquisition writes a key of its own under the lock's, bound to its
// session: the lock is held by the key with the lowest create revision,
// and waiters queue by create revision (FIFO), each watching only the
// key just before its own. The fencing token is the holder key's create
// revision, which etcd's revision makes strictly increasing for every
// later hold of the key (never the lease id, which is not). A fail-fast
// attempt on a held lock writes nothing. A release deletes the holder key
// only while its create revision is the hold's, so a retried release can
// never delete a newer hold.
//
// A request that carries the owner token of the lock's holder (propagated
// from another process: lock's Outbound and Intake) re-enters it: it
// writes an entry under the holder's key, on its own session, and shares
// the holder's fencing token; the holder's release then leaves the lock
// held until the last entry is released.
//
// A waiter granted the lock writes its key once more, and its fencing
// token is that write's revision: above every revision before, an
// operator's revocation included (Operator: Revoke deletes the holder key
// with an audit record, in one transaction).
//
// # Several resources at once
//
// The engine is a lockcore.Batch (Promises.Batch): a route's several
// resources are queued in one transaction, all or none, every key at one
// create revision, so each lock keeps its order of arrival; the set waits
// for each key's predecessor, is granted by one more transaction (one
// fencing token for the set), and is released in one. A set of more than
// 126 keys (etcd's default of 128 operations per transaction), or one
// that re-enters a hold by owner token, is taken one by one by the Locker.
// Sets queued at once never wait for each other in a cycle; a set may
// wait, until its budget runs out, for a request that took the same keys
// one by one and waits for it in turn.
//
// # Readers and writers
//
// Readers (Policy.Share -1, Promises.Shared) queue in the same create
// revision order as writers, under keys of their own kind: a reader holds
// when no writer's key was created before its own, a writer when no key at
// all was. Each waiter watches only the key it must outlast (a reader the
// last writer's before it, a writer the key just before its own), and when
// that key goes it looks again rather than taking the lock: the key that
// went may have been a waiter that gave up, with a holder still before it.
// So a writer is granted only when it is first, and never beside another
// writer or a reader; a reader never passes a queued writer, and the
// readers behind one writer enter together. A reader's fencing token is
// its own grant's revision. A request carrying the token of a reader that
// holds re-enters that reader's hold, even with a writer queued; one
// asking, by a reader's token, for the exclusive lock fails at once with
// ErrUpgrade. Revoke ends every reader's hold at once.
//
// # Results kept with a release
//
// The engine is a lockcore.Results (Promises.Results), as idempotency
// keys need (lock.Locker.Idempotent, middleware.Idempotency). Keep stores
// a result under "<Prefix>k/<key>", beside the lock's queue and outside
// it, on an etcd lease of its own of the time it is kept, rounded up to
// whole seconds, and frees the lock, in one transaction that stores
// nothing unless the hold's key is the one it created. The value names
// the hold (its key's create revision), so that a Keep sent again after
// a lost reply finds its own result and succeeds, storing nothing.
//
// An acquisition that wants the result (Request.Result) reads it in the
// transaction that would take or queue it; a waiter is granted the lock
// only by a transaction that finds no result, and otherwise deletes its
// key and fails with a *ResultFound: the holder's Keep wakes the waiter
// after it, which finds the result and leaves, waking the next. Such a
// waiter also watches the result's key, for a result kept while a waiter
// before it that does not want the result holds the lock.
//
// # No permits
//
// Permits (Policy.Share n > 0, each holder in a slot of its own) are not
// promised. A lock's holders may ask for different n (three holds of 3
// permits, and beside them one of 5, which enters where one of 2 does
// not), so a waiter's turn depends on the n of each hold before it, not on
// one key it can watch; and a slot would be one more key per hold that
// every release, withdrawal, revocation and lease expiry must remove in
// the same transaction as the hold's. Until a design keeps both as simple
// as the queue above, the engine refuses such a Policy (ErrMisconfigured),
// as the Locker does when a route is built.
//
// Not yet: the Gatekeeper interface.
package etcdengine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routelock/lock/lockcore"
)

// Options configure an Engine. The zero Options are the defaults.
type Options struct {
	// Prefix is put before every etcd key the engine writes. Engines that
	// share a lock must share a Prefix. Default: "routelock/".
	Prefix string

	// TTL is the default lease of a hold, rounded up to whole seconds, as
	// etcd grants leases; a server may grant more (its minimum lease).
	// It bounds how long a lock outlives a process that stopped renewing
	// it. Default: 10 seconds.
	TTL time.Duration

	// Timeout bounds each call to etcd: each call of an acquisition (its
	// wait in line is bounded by the request's Wait), releases and
	// keep-alives. A call that etcd does not answer within it fails with
	// lockcore.ErrUnavailable. Default: 2 seconds.
	Timeout time.Duration

	// Name is the engine's instance name, which operators see beside its
	// holds and waiters (package admin, the routelock command). Default:
	// "<hostname>-<pid>".
	Name string

	// Events, if set, is told what the engine does (lockcore.Events):
	// waits, wake-ups and the renewals of each session, for each hold on
	// it.
	Events lockcore.Events
}

// Engine takes locks in etcd. Make it with New; it is safe for concurrent
// use.
type Engine struct {
	cli      *clientv3.Client
	opt      Options
	ctx      context.Context // ends with Close
	cancel   context.CancelFunc
	closed   atomic.Bool
	instance string      // the engine id operators see
	pause    atomic.Bool // the tests' paused process: no keep-alive is sent
	defect   string      // the tests' planted defect (defects_test.go); "" in use

	mu       sync.Mutex
	sessions map[int64]*session // by TTL in seconds
}

// New returns an Engine on cli, which it does not own: Close leaves it
// open.
func New(cli *clientv3.Client, o Options) (*Engine, error) {
	if cli == nil {
		return nil, fmt.Errorf("%w: etcdengine.New: nil client", lockcore.ErrMisconfigured)
	}
	if o.Prefix == "" {
		o.Prefix = "routelock/"
	}
	if o.TTL == 0 {
		o.TTL = 10 * time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Second
	}
	if o.Name == "" {
		o.Name = defaultName()
	}
	if o.TTL < 0 || o.Timeout < 0 {
		return nil, fmt.Errorf("%w: etcdengine.Options: TTL %v, Timeout %v", lockcore.ErrMisconfigured, o.TTL, o.Timeout)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Engine{cli: cli, opt: o, ctx: ctx, cancel: cancel, instance: newInstance(), sessions: map[int64]*session{}}, nil
}

// Promises implements lockcore.Engine: waiters in order, ordered fencing
// tokens, re-entry by owner token, readers beside writers, several holds
// in one transaction, results kept with a release (Keep).
func (e *Engine) Promises() lockcore.Promises {
	return lockcore.Promises{FIFO: true, OrderedFences: true, TokenReentry: true, Shared: true, Batch: true, Results: true}
}

// Close stops the sessions' renewals and revokes their leases, so that
// every hold of the Engine ends at once, in etcd too; waiters fail with
// ErrClosed. Close is idempotent.
func (e *Engine) Close() error {
	if !e.closed.CompareAndSwap(false, true) {
		return nil
	}
	e.mu.Lock()
	ss := make([]*session, 0, len(e.sessions))
	for _, s := range e.sessions {
		ss = append(ss, s)
	}
	e.sessions = nil
	e.mu.Unlock()
	for _, s := range ss {
		s.lose(lockcore.ErrClosed) // its holds end, and waits on it
	}
	e.cancel()
	var errs []error
	for _, s := range ss {
		ctx, cancel := context.WithTimeout(context.Background(), e.opt.Timeout)
		if _, err := e.cli.Revoke(ctx, s.id); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	return errors.Join(errs...)
}

// The key layout under Prefix. key is a lockcore.Key's string, which
// never holds a NUL byte (lockcore.NewKey escapes it): "\x00" ends it, so
// that no key's prefix is another's.
func (e *Engine) queue(key string) string { return e.opt.Prefix + "q/" + key + "\x00" }
func (e *Engine) entries(key, holder string) string {
	return e.opt.Prefix + "e/" + key + "\x00" + holder + "\x00"
}
func (e *Engine) released(key, holder string) string {
	return e.opt.Prefix + "r/" + key + "\x00" + holder
}

// A reader's key in the queue is its token after "\x01", a writer's its
// token, which begins with no control character: the writers' keys of a
// queue are those from its writers' start on.
func (e *Engine) reader(key, token string) string { return e.queue(key) + "\x01" + token }
func (e *Engine) writers(key string) (from, end string) {
	q := e.queue(key)
	return q + "\x02", clientv3.GetPrefixRangeEnd(q)
}
func (e *Engine) isReader(key string, k []byte) bool {
	return strings.HasPrefix(string(k), e.queue(key)+"\x01")
}

// Take implements lockcore.Engine.
func (e *Engine) Take(ctx context.Context, r lockcore.Request) (lockcore.Hold, error) {
	if e.closed.Load() {
		return nil, lockcore.ErrClosed
	}
	if r.Share > 0 {
		return nil, fmt.Errorf("%w: Share %d: etcdengine has no permits", lockcore.ErrMisconfigured, r.Share)
	}
	if r.Token == "" || r.Token[0] < ' ' {
		return nil, fmt.Errorf("%w: etcdengine: an owner token that is empty or begins with a control character", lockcore.ErrMisconfigured)
	}
	ttl := r.TTL
	if ttl == 0 {
		ttl = e.opt.TTL
	}
	s, err := e.session(ctx, ttl)
	if err != nil {
		return nil, err
	}
	defer s.unref()
	if r.Share < 0 {
		return e.takeShared(ctx, s, r)
	}
	key := r.Key.String()
	q := e.queue(key)
	mine := q + r.Token
	for {
		// Free: take it at once. Held: see by whom, and whether a token
		// of r's holds it shared, writing nothing.
		// One that wants the result (Request.Result) takes it if it is
		// there, and nothing else.
		cond := []clientv3.Cmp{clientv3.Compare(clientv3.Version(q).WithPrefix(), "=", 0)}
		orElse := []clientv3.Op{clientv3.OpGet(q, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))}
		for _, j := range r.Join {
			orElse = append(orElse, clientv3.OpGet(e.reader(key, j), clientv3.WithCountOnly()))
		}
		cond, orElse = e.unlessResult(r, cond, orElse)
		cctx, cancel := e.call(ctx)
		resp, err := e.cli.Txn(cctx).
			If(cond...).
			Then(clientv3.OpPut(mine, e.record(r, false), clientv3.WithLease(s.id))).
			Else(orElse...).
			Commit()
		cancel()
		if err != nil {
			// It may have been written all the same: a lock held by no one.
			e.abandon(s, mine, timedOut(err))
			return nil, e.unavailable(ctx, "take", err)
		}
		if resp.Succeeded {
			rev := resp.Header.Revision
			return e.held(s, r.Key, mine, r.Token, rev, rev, "", false), nil
		}
		if err := e.resultIn(r, resp, len(orElse)-1); err != nil {
			return nil, err
		}
		for _, rr := range resp.Responses[1 : 1+len(r.Join)] {
			if rr.GetResponseRange().Count > 0 {
				return nil, fmt.Errorf("%w: %s", lockcore.ErrUpgrade, key)
			}
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			continue // released meanwhile
		}
		holder := kvs[0]
		if tok := readRecord(holder.Value).Token; joins(r.Join, tok) {
			if e.isReader(key, holder.Key) {
				return nil, fmt.Errorf("%w: %s", lockcore.ErrUpgrade, key)
			}
			h, err := e.reenter(ctx, s, r, holder, tok)
			if h != nil || err != nil {
				return h, err
			}
			continue // the holder released meanwhile
		}
		if r.Wait < 0 {
			return nil, &lockcore.ContentionError{Key: key, RetryAfter: 100 * time.Millisecond}
		}
		return e.wait(ctx, s, r, mine, q, clientv3.GetPrefixRangeEnd(q))
	}
}

// joins reports whether tok is one of join.
func joins(join []string, tok string) bool {
	for _, j := range join {
		if j == tok {
			return true
		}
	}
	return false
}

// wait queues the acquisition r, writing its key mine, and waits up to
// r.Wait for every key in [from, end) queued before it to go: for a
// writer, every key of the lock's queue; for a reader (takeShared), every
// writer's, so that a reader never passes a queued writer, and readers
// queued together hold together.
func (e *Engine) wait(ctx context.Context, s *session, r lockcore.Request, mine, from, end string) (lockcore.Hold, error) {
	key := r.Key.String()
	cond, orElse := e.unlessResult(r, []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(mine), "=", 0)}, nil)
	cctx, cancel := e.call(ctx)
	resp, err := e.cli.Txn(cctx).
		If(cond...).
		Then(clientv3.OpPut(mine, e.record(r, true), clientv3.WithLease(s.id))).
		Else(orElse...).
		Commit()
	cancel()
	if err != nil {
		// It may be queued all the same, where no one would ever take it.
		e.abandon(s, mine, timedOut(err))
		return nil, e.unavailable(ctx, "queue", err)
	}
	if err := e.resultIn(r, resp, 0); err != nil {
		return nil, err
	}
	if !resp.Succeeded {
		return nil, fmt.Errorf("%w: an owner token queued twice for %s", lockcore.ErrMisconfigured, key)
	}
	rev := resp.Header.Revision
	timer := time.NewTimer(r.Wait)
	defer timer.Stop()
	waiting, waited := e.waitingFor(r.Key)
	defer waited()
	if err := e.awaitTurn(ctx, s, r.Key, from, end, rev, timer.C, waiting, e.wants(r, mine, rev)); err != nil {
		// A cancelled wait leaves no key behind (etcd#9715); one that
		// found the result deleted its key as it read it.
		if _, found := errors.AsType[*lockcore.ResultFound](err); !found {
			e.withdraw(s, mine, rev, errors.Is(err, lockcore.ErrUnavailable))
		}
		return nil, err
	}
	return e.grant(ctx, s, r, mine, rev)
}

// wanted is a waiter that wants the result of its key (Request.Result):
// the result's key, and the waiter's own, created at rev.
type wanted struct {
	key, result, mine string
	rev               int64
}

// wants returns the wanted of a waiter for r, whose key mine was created
// at rev, or nil when r does not want the result.
func (e *Engine) wants(r lockcore.Request, mine string, rev int64) *wanted {
	if !r.Result || e.defect == "grantOverResult" {
		return nil
	}
	k := r.Key.String()
	return &wanted{key: k, result: e.resultKey(k), mine: mine, rev: rev}
}

// claim is called when the result that w wants was stored: it reads it
// and deletes w's key, in one transaction, and fails with its
// *ResultFound. It returns nil when the result is gone again (dropped),
// for w to wait on.
func (e *Engine) claim(ctx context.Context, w *wanted) error {
	cctx, cancel := e.call(ctx)
	resp, err := e.cli.Txn(cctx).
		If(clientv3.Compare(clientv3.CreateRevision(w.result), ">", 0)).
		Then(clientv3.OpGet(w.result), guardedDelete(w.mine, w.rev)).
		Commit()
	cancel()
	switch {
	case err != nil && ctx.Err() != nil:
		return errors.Join(&lockcore.ContentionError{Key: w.key, RetryAfter: 100 * time.Millisecond, TimedOut: true}, ctx.Err())
	case err != nil:
		return e.unavailable(ctx, "wait", err)
	case !resp.Succeeded:
		return nil
	}
	return e.found(w.key, resp.Responses[0].GetResponseRange().Kvs[0].Value)
}

// awaitTurn waits until no key of k's queue from from to end (all of
// them for a writer, the writers' for a reader) was created before rev,
// on session s, until timer fires or ctx ends. It watches the last such
// key, and looks again when it goes: a key that goes is not always the
// holder's (a waiter may give up), so a waiter is first only when none is
// left before it. It calls waiting, if not nil, before it first waits for
// another key.
//
// A waiter that wants the result (want not nil) watches the result's key
// too, from the revision after it queued: when a result is stored, it
// claims it (claim), and fails with its *ResultFound, whoever holds the
// key then (a waiter before it that does not want the result, granted by
// the release that kept it, for one).
func (e *Engine) awaitTurn(ctx context.Context, s *session, k lockcore.Key, from, end string, rev int64, timer <-chan time.Time, waiting func(), want *wanted) error {
	key := k.String()
	var kept clientv3.WatchChan // nil: none
	if want != nil {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		kept = e.cli.Watch(wctx, want.result, clientv3.WithRev(rev+1), clientv3.WithFilterDelete())
	}
	for {
		// The key queued last before mine: when it goes, mine may be first.
		cctx, cancel := e.call(ctx)
		before, err := e.cli.Get(cctx, from, clientv3.WithRange(end), clientv3.WithMaxCreateRev(rev-1),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(1))
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return errors.Join(&lockcore.ContentionError{Key: key, RetryAfter: 100 * time.Millisecond, TimedOut: true}, ctx.Err())
			}
			return e.unavailable(ctx, "wait", err)
		}
		if len(before.Kvs) == 0 {
			return nil
		}
		if waiting != nil {
			waiting()
			waiting = nil
		}
		// The watch starts at etcd's current revision, where etcd serves
		// it as writes commit; a watch from an earlier revision is served
		// by a catch-up that runs every 100ms. So the key is looked at once
		// more when the watch is in place: it may have gone before.
		pred := string(before.Kvs[0].Key)
		wctx, cancel := context.WithCancel(ctx)
		ch := e.cli.Watch(wctx, pred, clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
		next := func() (clientv3.WatchResponse, error) {
			for {
				select {
				case w, ok := <-kept:
					if !ok || w.Err() != nil {
						kept = nil // the grant looks at the result all the same
						continue
					}
					if len(w.Events) == 0 {
						continue
					}
					if err := e.claim(ctx, want); err != nil {
						return w, err
					}
					continue // dropped since: wait on
				case w, ok := <-ch:
					if (!ok || w.Err() != nil) && ctx.Err() != nil {
						// The watch ended with ctx: the caller left.
						return w, errors.Join(&lockcore.ContentionError{Key: key, RetryAfter: 100 * time.Millisecond, TimedOut: true}, ctx.Err())
					}
					if !ok || w.Err() != nil {
						return w, e.unavailable(ctx, "watch", errors.Join(w.Err(), errNoAnswer))
					}
					return w, nil
				case <-s.done:
					return clientv3.WatchResponse{}, s.err
				case <-timer:
					if ev := e.opt.Events; ev != nil {
						ev.Woken(k, "timer")
					}
					return clientv3.WatchResponse{}, &lockcore.ContentionError{Key: key, RetryAfter: 100 * time.Millisecond, TimedOut: true}
				case <-ctx.Done():
					return clientv3.WatchResponse{}, errors.Join(&lockcore.ContentionError{Key: key, RetryAfter: 100 * time.Millisecond, TimedOut: true}, ctx.Err())
				}
			}
		}
		w, gone := next()
		if gone == nil && w.Created {
			var still *clientv3.GetResponse
			cctx, cancel := e.call(ctx)
			still, gone = e.cli.Get(cctx, pred, clientv3.WithCountOnly())
			cancel()
			switch {
			case gone != nil && ctx.Err() != nil:
				gone = errors.Join(&lockcore.ContentionError{Key: key, RetryAfter: 100 * time.Millisecond, TimedOut: true}, ctx.Err())
			case gone != nil:
				gone = e.unavailable(ctx, "wait", gone)
			case still.Count == 0:
				// Gone already: as if the watch had told it.
			default:
				w, gone = next()
			}
		}
		if gone == nil {
			if ev := e.opt.Events; ev != nil {
				ev.Woken(k, "message")
			}
			if e.defect == "grantOnDelete" {
				cancel()
				return nil // the key before went: taken for a grant
			}
		}
		cancel()
		if gone != nil {
			return gone
		}
	}
}

// waitingFor returns the calls that tell Events that an acquisition of k
// waits for another owner's key (waiting, at most once), and that the
// wait ended (waited, which does nothing when waiting was not called).
func (e *Engine) waitingFor(k lockcore.Key) (waiting, waited func()) {
	ev := e.opt.Events
	if ev == nil {
		return nil, func() {}
	}
	var began bool
	return func() { began = true; ev.Waiting(k, 1) }, func() {
		if began {
			ev.Waiting(k, -1)
		}
	}
}

// errNoAnswer is why a call etcd did not answer failed.
var errNoAnswer = errors.New("etcd did not answer")

// call returns ctx bounded by Options.Timeout, for one call to etcd of
// an acquisition: etcd's client retries a call that etcd does not answer
// until its context ends, so an etcd that went silent would otherwise hold
// the caller until the caller gives up, however short its wait. Waiting
// for a turn (the watches) is bounded by the request's Wait instead.
func (e *Engine) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, e.opt.Timeout)
}

// unavailable is the error of a call to etcd that failed under ctx.
func (e *Engine) unavailable(ctx context.Context, what string, err error) error {
	if e.closed.Load() {
		return lockcore.ErrClosed
	}
	if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		// The call's own bound (call), not the caller's: a caller that
		// did not give up is not told that its deadline passed.
		err = fmt.Errorf("%w within %v", errNoAnswer, e.opt.Timeout)
	}
	out := fmt.Errorf("%w: etcd %s: %w", lockcore.ErrUnavailable, what, err)
	if ctx.Err() != nil {
		return errors.Join(out, ctx.Err())
	}
	return out
}

// withdraw deletes the key mine of a wait that gave up, if it is still
// the one created at rev (retract): later, in the background, when etcd
// did not answer a call of the wait, for which the caller is not to wait
// once more.
func (e *Engine) withdraw(s *session, mine string, rev int64, later bool) {
	if e.defect == "keepWaiter" {
		return
	}
	e.retract(s, mine, clientv3.Compare(clientv3.CreateRevision(mine), "=", rev), later)
}

// abandon deletes key, which a call that failed (unanswered, or given up
// at its caller's deadline) may have written on session s all the same,
// if it is there on s's lease (retract). Such a key would otherwise
// outlive its acquisition as long as the session, which the engine renews
// for its other holds: a lock held, or a queue blocked, by no one. The key
// is the acquisition's own (its owner token's), which no hold of s has:
// the Locker re-enters a token's holds in memory. With later (the call
// timed out: timedOut) it deletes it in the background, rather than ask
// the same silent etcd once more while the caller waits.
func (e *Engine) abandon(s *session, key string, later bool) {
	e.retire(s)
	e.retract(s, key, clientv3.Compare(clientv3.LeaseValue(key), "=", s.id), later)
}

// timedOut reports whether err is that of a call etcd did not answer in
// time (Options.Timeout, or the caller's deadline).
func timedOut(err error) bool { return errors.Is(err, context.DeadlineExceeded) }

// retract deletes key if cmp holds (clean).
func (e *Engine) retract(s *session, key string, cmp clientv3.Cmp, later bool) {
	e.clean([]*session{s}, later, clientv3.OpTxn([]clientv3.Cmp{cmp}, []clientv3.Op{clientv3.OpDelete(key)}, nil))
}

// clean sends ops, guarded deletes of keys on the sessions ss, in one
// transaction: at once (or, if later, in the background), and when etcd
// does not answer, again in the background until it does, until every
// session of ss has ended (their keys go with their leases, which the
// engine no longer renews), or until the engine closes.
func (e *Engine) clean(ss []*session, later bool, ops ...clientv3.Op) {
	del := func() error {
		ctx, cancel := context.WithTimeout(e.ctx, e.opt.Timeout)
		defer cancel()
		_, err := e.cli.Txn(ctx).Then(ops...).Commit()
		return err
	}
	if !later && (del() == nil || e.closed.Load()) {
		return
	}
	go func() {
		if later && del() == nil {
			return
		}
		for {
			t := time.NewTimer(e.opt.Timeout / 4)
			select {
			case <-e.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			if ended(ss) || del() == nil {
				return
			}
		}
	}()
}

// ended reports whether every session of ss has ended.
func ended(ss []*session) bool {
	for _, s := range ss {
		select {
		case <-s.done:
		default:
			return false
		}
	}
	return true
}

// grant makes the hold of a waiter whose key mine, created at rev, is
// now the first: it writes the key once more, so that its fencing token,
// the write's revision, is above every revision before it, a revocation's
// included (a waiter queued before a revocation is granted after it).
//
// A waiter that wants the result (Request.Result) is granted only while
// none is stored: when one is, the same transaction deletes its key, and
// it fails with a *ResultFound. So a holder that keeps a result (Keep),
// which deletes its key, wakes the waiter after it, which finds the
// result and goes, waking the one after it in turn.
func (e *Engine) grant(ctx context.Context, s *session, r lockcore.Request, mine string, rev int64) (lockcore.Hold, error) {
	cond := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(mine), "=", rev)}
	var orElse []clientv3.Op
	unless := r.Result && e.defect != "grantOverResult"
	if unless {
		cond, orElse = e.unlessResult(r, cond, orElse)
		orElse = append(orElse, guardedDelete(mine, rev))
	}
	cctx, cancel := e.call(ctx)
	resp, err := e.cli.Txn(cctx).
		If(cond...).
		Then(clientv3.OpPut(mine, e.record(r, true), clientv3.WithLease(s.id))).
		Else(orElse...).
		Commit()
	cancel()
	if err != nil {
		e.withdraw(s, mine, rev, true)
		return nil, e.unavailable(ctx, "grant", err)
	}
	if unless { // else nothing read the result (the planted defect grantOverResult)
		if err := e.resultIn(r, resp, 0); err != nil {
			return nil, err
		}
	}
	if !resp.Succeeded {
		// Its key went with its session, or an operator removed it.
		return nil, fmt.Errorf("%w: etcd lost the queued acquisition of %s", lockcore.ErrUnavailable, r.Key)
	}
	return e.held(s, r.Key, mine, r.Token, rev, resp.Header.Revision, "", r.Share < 0), nil
}

// unlessResult adds to a transaction that takes r.Key, when r wants the
// result (Request.Result), the condition that none is stored, and, last
// of what it does otherwise, the read of the result (resultIn).
func (e *Engine) unlessResult(r lockcore.Request, cond []clientv3.Cmp, orElse []clientv3.Op) ([]clientv3.Cmp, []clientv3.Op) {
	if !r.Result {
		return cond, orElse
	}
	rk := e.resultKey(r.Key.String())
	return append(cond, clientv3.Compare(clientv3.CreateRevision(rk), "=", 0)), append(orElse, clientv3.OpGet(rk))
}

// resultIn returns the *ResultFound of a transaction made with
// unlessResult for r that failed and found the result, its read the
// at'th of what it did otherwise, and nil otherwise.
func (e *Engine) resultIn(r lockcore.Request, resp *clientv3.TxnResponse, at int) error {
	if !r.Result || resp.Succeeded {
		return nil
	}
	if kvs := resp.Responses[at].GetResponseRange().Kvs; len(kvs) > 0 {
		return e.found(r.Key.String(), kvs[0].Value)
	}
	return nil
}

// reenter re-enters the hold of the holder key kv (owned by tok) for r:
// an entry under it on session s, with the holder's fencing token (its
// last write's revision). It returns nil, nil when the holder key is gone
// meanwhile.
func (e *Engine) reenter(ctx context.Context, s *session, r lockcore.Request, kv *mvccpb.KeyValue, tok string) (lockcore.Hold, error) {
	key := r.Key.String()
	holder := string(kv.Key)
	entry := e.entries(key, tok) + r.Token
	cctx, cancel := e.call(ctx)
	resp, err := e.cli.Txn(cctx).
		If(clientv3.Compare(clientv3.CreateRevision(holder), "=", kv.CreateRevision),
			clientv3.Compare(clientv3.ModRevision(holder), "=", kv.ModRevision)).
		Then(clientv3.OpPut(entry, e.record(r, false), clientv3.WithLease(s.id))).
		Commit()
	cancel()
	if err != nil {
		// It may have been written all the same, holding the lock for no one.
		e.abandon(s, entry, timedOut(err))
		return nil, e.unavailable(ctx, "re-enter", err)
	}
	if !resp.Succeeded {
		return nil, nil
	}
	return e.held(s, r.Key, holder, tok, kv.CreateRevision, kv.ModRevision, entry, e.isReader(key, kv.Key)), nil
}
