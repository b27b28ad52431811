package etcdengine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routelock/lock/lockcore"
)

// hold is a hold the Engine took: the lock's holder key, or an entry
// under it (a re-entry by owner token).
type hold struct {
	e      *Engine
	s      *session
	key    lockcore.Key
	holder string // the lock's holder key
	token  string // the holder's owner token
	rev    int64  // the holder key's create revision
	fence  int64  // the revision of the holder key's grant: its fencing token
	entry  string // the entry's key, for a re-entry; "" for the holder
	shared bool   // a reader's, or a re-entry of one

	once sync.Once
	done chan struct{}
	// unref: Release has ended the hold's use of its session.
	unref atomic.Bool
	mu    sync.Mutex
	err   error // why it ended, once it has
	stop  context.CancelFunc
}

var (
	errDeleted  error = &both{"routelock: lease lost: its key was deleted from etcd", [2]error{lockcore.ErrLockLost, nil}}
	errSession  error = &both{"routelock: lease lost: etcd did not confirm its session before the lease ran out (lock service unavailable)", [2]error{lockcore.ErrLockLost, lockcore.ErrUnavailable}}
	errReleased       = errors.New("routelock: released")
)

// both is an error that matches two sentinels.
type both struct {
	msg string
	is  [2]error
}

func (b *both) Error() string { return b.msg }
func (b *both) Is(target error) bool {
	return target != nil && (target == b.is[0] || target == b.is[1])
}

// held makes the hold of holder (or of entry, under it) on session s, and
// watches for its end: its session lost, or its holder key (or entry)
// deleted.
func (e *Engine) held(s *session, key lockcore.Key, holder, token string, rev, fence int64, entry string, shared bool) *hold {
	h := &hold{e: e, s: s, key: key, holder: holder, token: token, rev: rev, fence: fence, entry: entry, shared: shared, done: make(chan struct{})}
	s.ref() // until Release
	// Not e's context: Close ends a hold through its session.
	ctx, cancel := context.WithCancel(context.Background())
	h.stop = cancel
	watch := []string{holder}
	if entry != "" {
		watch = append(watch, entry)
	}
	// The watches start after the hold is handed out, from the revision
	// after its grant, so that they miss no deletion and the Take does not
	// wait for etcd to confirm them; the session's end is watched at once,
	// for a watch is not started while etcd does not answer.
	deleted := make(chan error, len(watch))
	go func() {
		for _, k := range watch {
			ch := e.cli.Watch(ctx, k, clientv3.WithRev(fence+1), clientv3.WithFilterPut())
			go func() {
				for w := range ch {
					if w.Err() != nil {
						continue // the client re-watches; the session judges outages
					}
					for _, ev := range w.Events {
						if ev.Type == clientv3.EventTypeDelete {
							deleted <- errDeleted
							return
						}
					}
				}
			}()
		}
	}()
	go h.watch(ctx, deleted)
	return h
}

// watch ends h when its session is lost or one of its keys is deleted.
func (h *hold) watch(ctx context.Context, deleted <-chan error) {
	select {
	case <-ctx.Done():
	case <-h.s.done:
		h.end(errSession)
	case err := <-deleted:
		h.end(h.e.revoked(h.key, h.fence, err))
	}
}

// end ends h with cause err, once.
func (h *hold) end(err error) {
	h.once.Do(func() {
		h.mu.Lock()
		h.err = err
		h.mu.Unlock()
		h.stop()
		close(h.done)
	})
}

func (h *hold) Fence() int64 {
	if h.e.defect == "fenceFromLease" {
		return int64(h.s.id)
	}
	return h.fence
}
func (h *hold) Shared() (int, bool)    { return -1, h.shared }
func (h *hold) Token() string          { return h.token }
func (h *hold) Done() <-chan struct{}  { return h.done }
func (h *hold) sessionValid() bool     { return h.s.valid() }
func (h *hold) String() string         { return fmt.Sprintf("etcd hold %s fence %d", h.key, h.fence) }
func (h *hold) lostErr() (error, bool) { h.mu.Lock(); defer h.mu.Unlock(); return h.err, h.err != nil }

// Err implements lockcore.Hold: nil while the session is certainly valid
// and the hold has not ended.
func (h *hold) Err() error {
	if err, ended := h.lostErr(); ended {
		if err == errReleased {
			return fmt.Errorf("%w: released", lockcore.ErrLockLost)
		}
		return err
	}
	if !h.sessionValid() {
		return errSession
	}
	return nil
}

// Release implements lockcore.Hold. A holder with entries (re-entries by
// its token) marks itself released and leaves the lock to the last of
// them; an entry deletes itself and, when it was the last of a released
// holder's, the holder key.
//
// A hold lost by its own clock (its session ran out unconfirmed) may
// still be in etcd, whose lease has not run out yet: its keys are deleted
// all the same, guarded by their create revision, so that the next waiter
// need not wait for etcd to expire them; Release then returns why it was
// lost.
func (h *hold) Release(ctx context.Context, early error) error {
	lost, _ := h.lostErr()
	h.end(errReleased)
	err := h.release(ctx)
	if errors.Is(err, lockcore.ErrUnavailable) {
		// Its keys may be left in etcd, on a session the engine renews:
		// they go with the session's lease once its last hold is released.
		h.e.retire(h.s)
	}
	if h.unref.CompareAndSwap(false, true) {
		h.s.unref()
	}
	if lost != nil && lost != errReleased {
		return lost
	}
	return err
}

// release gives h up in etcd (see Release).
func (h *hold) release(ctx context.Context) error {
	e := h.e
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.opt.Timeout)
	defer cancel()
	key := h.key.String()
	ents := e.entries(key, h.token)
	mark := e.released(key, h.token)
	if h.entry != "" {
		if _, err := e.cli.Delete(rctx, h.entry); err != nil {
			return e.unavailable(rctx, "release", err)
		}
		return e.finish(rctx, h.holder, h.rev, ents, mark)
	}
	// The holder: free the lock unless an entry holds it still.
	resp, err := e.cli.Txn(rctx).
		If(clientv3.Compare(clientv3.CreateRevision(h.holder), "=", h.rev),
			clientv3.Compare(clientv3.Version(ents).WithPrefix(), "=", 0)).
		Then(clientv3.OpDelete(h.holder)).
		Else(clientv3.OpGet(h.holder, clientv3.WithCountOnly())).
		Commit()
	if err != nil {
		return e.unavailable(rctx, "release", err)
	}
	if resp.Succeeded {
		return nil
	}
	// Entries hold it: mark it released, for the last of them.
	resp, err = e.cli.Txn(rctx).
		If(clientv3.Compare(clientv3.CreateRevision(h.holder), "=", h.rev)).
		Then(clientv3.OpPut(mark, "", clientv3.WithLease(h.s.id))).
		Commit()
	if err != nil {
		return e.unavailable(rctx, "release", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: its key was deleted from etcd", lockcore.ErrLockLost)
	}
	return e.finish(rctx, h.holder, h.rev, ents, mark)
}

// finish deletes the holder key created at rev, and its released mark,
// when the holder released it and no entry is left.
func (e *Engine) finish(ctx context.Context, holder string, rev int64, ents, mark string) error {
	_, err := e.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(holder), "=", rev),
			clientv3.Compare(clientv3.CreateRevision(mark), ">", 0),
			clientv3.Compare(clientv3.Version(ents).WithPrefix(), "=", 0)).
		Then(clientv3.OpDelete(holder), clientv3.OpDelete(mark)).
		Commit()
	if err != nil {
		return e.unavailable(ctx, "release", err)
	}
	return nil
}

// session is an etcd lease of the Engine's, for holds of one TTL.
type session struct {
	e     *Engine
	id    clientv3.LeaseID
	ttl   time.Duration // as granted
	until atomicTime    // the lease certainly lives until then (monotonic)
	done  chan struct{} // closed when lost
	err   error         // why, once done is closed
	once  sync.Once

	// Under e.mu: the acquisitions under way on the session and its holds
	// not yet released; and whether it is retired: no acquisition takes
	// it any more, and once refs is 0 it is dropped.
	refs    int
	retired bool
}

func (s *session) ref() {
	s.e.mu.Lock()
	s.refs++
	s.e.mu.Unlock()
}

// unref ends one use of s (an acquisition under way, or a hold's), and
// drops s when it is retired and that was the last.
func (s *session) unref() {
	s.e.mu.Lock()
	s.refs--
	drop := s.retired && s.refs == 0
	s.e.mu.Unlock()
	if drop {
		s.drop()
	}
}

// retire takes s out of use, after a write on it whose answer never
// came: etcd may apply such a write later than any clean-up that looked
// for it (a request that timed out in a leader's change is committed by
// the next leader), and the key it leaves would hold a lock, or block a
// queue, for no one, for as long as the engine renews s. New acquisitions
// get a new session; s is dropped once its last hold is released, and its
// lease, no longer renewed, takes any such key with it.
func (e *Engine) retire(s *session) {
	e.mu.Lock()
	if s.retired {
		e.mu.Unlock()
		return
	}
	s.retired = true
	for secs, cur := range e.sessions {
		if cur == s {
			delete(e.sessions, secs)
		}
	}
	drop := s.refs == 0
	e.mu.Unlock()
	if drop {
		s.drop()
	}
}

// drop stops renewing s, which nothing uses any more, and revokes its
// lease; when etcd does not answer, the lease expires within its TTL.
func (s *session) drop() {
	s.lose(errSession)
	go func() {
		ctx, cancel := context.WithTimeout(s.e.ctx, s.ttl)
		defer cancel()
		for ctx.Err() == nil {
			rctx, rcancel := context.WithTimeout(ctx, s.e.opt.Timeout)
			_, err := s.e.cli.Revoke(rctx, s.id)
			rcancel()
			if err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound) {
				return
			}
			t := time.NewTimer(s.e.opt.Timeout / 4)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}()
}

func (s *session) valid() bool { return time.Now().Before(s.until.load()) }

// lose ends the session with cause err, once.
func (s *session) lose(err error) {
	s.once.Do(func() {
		s.err = err
		close(s.done)
	})
}

// session returns the live session for holds of ttl, granting one when
// there is none, counted as used (session.ref) until the caller's unref.
func (e *Engine) session(ctx context.Context, ttl time.Duration) (*session, error) {
	for {
		s, err := e.liveSession(ctx, ttl)
		if err != nil {
			return nil, err
		}
		e.mu.Lock()
		ok := !s.retired
		if ok {
			s.refs++
		}
		e.mu.Unlock()
		if ok {
			return s, nil
		}
	}
}

// liveSession returns the live session for holds of ttl, granting one
// when there is none.
func (e *Engine) liveSession(ctx context.Context, ttl time.Duration) (*session, error) {
	secs := int64((ttl + time.Second - 1) / time.Second)
	e.mu.Lock()
	s := e.sessions[secs]
	e.mu.Unlock()
	if s != nil {
		select {
		case <-s.done:
		default:
			if s.valid() {
				return s, nil
			}
		}
	}
	sent := time.Now()
	cctx, cancel := e.call(ctx)
	g, err := e.cli.Grant(cctx, secs)
	cancel()
	if err != nil {
		return nil, e.unavailable(ctx, "grant", err)
	}
	s = &session{e: e, id: g.ID, ttl: time.Duration(g.TTL) * time.Second, done: make(chan struct{})}
	s.until.store(sent.Add(s.ttl - s.ttl/10))
	e.mu.Lock()
	if e.sessions == nil { // closed meanwhile
		e.mu.Unlock()
		_, _ = e.cli.Revoke(context.Background(), g.ID)
		return nil, lockcore.ErrClosed
	}
	if old := e.sessions[secs]; old != nil && old != s {
		select {
		case <-old.done:
		default:
			if old.valid() {
				// Another acquisition granted one first: use it.
				e.mu.Unlock()
				_, _ = e.cli.Revoke(context.Background(), g.ID)
				return old, nil
			}
		}
	}
	e.sessions[secs] = s
	e.mu.Unlock()
	go s.keepAlive()
	return s, nil
}

// keepAlive renews the session every third of its TTL, with one
// keep-alive request each, and loses it when its validity runs out
// unrenewed or etcd says the lease is gone.
func (s *session) keepAlive() {
	e := s.e
	next := s.ttl / 3
	for {
		t := time.NewTimer(min(next, max(time.Until(s.until.load()), 0)))
		select {
		case <-e.ctx.Done():
			t.Stop()
			return
		case <-s.done:
			t.Stop()
			return
		case <-t.C:
		}
		if !s.valid() {
			s.lose(errSession)
			return
		}
		sent := time.Now()
		if e.pause.Load() {
			next = s.ttl / 10
			continue
		}
		ctx, cancel := context.WithDeadline(e.ctx, s.until.load())
		resp, err := e.cli.KeepAliveOnce(ctx, s.id)
		cancel()
		switch {
		case err == nil && resp.TTL > 0:
			s.until.store(sent.Add(time.Duration(resp.TTL)*time.Second - s.ttl/10))
			next = s.ttl / 3
		case err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound) || e.ctx.Err() != nil:
			s.lose(errSession) // etcd says the lease is gone, or Close
			return
		default:
			next = s.ttl / 10 // not answered: again a tenth later, until it runs out
		}
	}
}

// atomicTime is a time.Time read and written atomically, monotonic clock
// included.
type atomicTime struct {
	mu sync.Mutex
	t  time.Time
}

func (a *atomicTime) load() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.t
}

func (a *atomicTime) store(t time.Time) {
	a.mu.Lock()
	a.t = t
	a.mu.Unlock()
}
