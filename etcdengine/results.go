package etcdengine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routelock/lock/lockcore"
)

// A key's result (lockcore.Results) is one etcd key beside its lock,
// "<Prefix>k/<key>", outside every queue's range (so it never counts as a
// holder or a waiter), bound to an etcd lease of its own that runs for as
// long as it is kept, rounded up to whole seconds. It holds
//
//	<create revision> <expiry>\n<result>
//
// where the create revision is the holder key's of the hold that kept it,
// which names that hold among every hold of the key (etcd gives each
// transaction a revision of its own), so that a Keep sent again after a
// lost reply sees that its own store landed; and the expiry is when the
// result's lease, as etcd granted it, runs out (Unix milliseconds, by the
// engine's clock as it asked), which StoredResults reports.

// resultKey returns the etcd key of key's result.
func (e *Engine) resultKey(key string) string { return e.opt.Prefix + "k/" + key }

// resultValue is the value Keep stores: res kept by the hold whose holder
// key was created at rev, until expires.
func resultValue(rev int64, expires time.Time, res []byte) string {
	var b strings.Builder
	b.Grow(len(res) + 42)
	b.WriteString(strconv.FormatInt(rev, 10))
	b.WriteByte(' ')
	b.WriteString(strconv.FormatInt(expires.UnixMilli(), 10))
	b.WriteByte('\n')
	b.Write(res)
	return b.String()
}

// stored is a result as etcd holds it (resultValue).
type stored struct {
	rev     int64     // the create revision of the holder key that kept it
	expires time.Time // when its lease runs out
	res     []byte
}

// readResult reads a stored result; ok is false for a value that this
// engine did not write.
func readResult(v []byte) (s stored, ok bool) {
	head, res, found := bytes.Cut(v, []byte{'\n'})
	if !found {
		return s, false
	}
	rev, exp, found := strings.Cut(string(head), " ")
	if !found {
		return s, false
	}
	var err1, err2 error
	s.rev, err1 = strconv.ParseInt(rev, 10, 64)
	ms, err2 := strconv.ParseInt(exp, 10, 64)
	if err1 != nil || err2 != nil {
		return s, false
	}
	s.expires, s.res = time.UnixMilli(ms), res
	return s, true
}

// found is the error of an acquisition that found the stored value v of
// key's result.
func (e *Engine) found(key string, v []byte) error {
	s, ok := readResult(v)
	if !ok {
		return e.foreign(key)
	}
	return &lockcore.ResultFound{Result: bytes.Clone(s.res)}
}

// foreign is the error of a result's value this engine did not write.
func (e *Engine) foreign(key string) error {
	return fmt.Errorf("%w: the result of %s in etcd is not one this engine wrote", lockcore.ErrMisconfigured, key)
}

// Result implements lockcore.Results: one read of the result's key,
// waiting for etcd up to Options.Timeout.
func (e *Engine) Result(ctx context.Context, key lockcore.Key) ([]byte, bool, error) {
	if e.closed.Load() {
		return nil, false, lockcore.ErrClosed
	}
	k := key.String()
	rctx, cancel := context.WithTimeout(ctx, e.opt.Timeout)
	defer cancel()
	resp, err := e.cli.Get(rctx, e.resultKey(k))
	if err != nil {
		return nil, false, e.unavailable(ctx, "result", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, false, nil
	}
	s, ok := readResult(resp.Kvs[0].Value)
	if !ok {
		return nil, false, e.foreign(k)
	}
	return s.res, true, nil
}

// DropResult implements lockcore.Results: one delete of the result's key,
// waiting for etcd up to Options.Timeout.
func (e *Engine) DropResult(ctx context.Context, key lockcore.Key) (bool, error) {
	if e.closed.Load() {
		return false, lockcore.ErrClosed
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.opt.Timeout)
	defer cancel()
	resp, err := e.cli.Delete(rctx, e.resultKey(key.String()))
	if err != nil {
		return false, e.unavailable(rctx, "drop result", err)
	}
	return resp.Deleted > 0, nil
}

// StoredResults implements lockcore.Results: one range read of the
// results' keys under prefix, in key order, waiting for etcd up to
// Options.Timeout. Size is the result's bytes (without the line of the
// engine's stored before it), Expires when the result's lease runs out, as
// the engine reckoned it when it kept the result: a change of etcd's
// leader, which extends every lease, may keep it longer.
func (e *Engine) StoredResults(ctx context.Context, prefix string, limit int) ([]lockcore.StoredResult, bool, error) {
	if e.closed.Load() {
		return nil, false, lockcore.ErrClosed
	}
	if limit <= 0 {
		return nil, false, fmt.Errorf("%w: etcdengine.Engine.StoredResults: limit %d must be positive", lockcore.ErrMisconfigured, limit)
	}
	rctx, cancel := context.WithTimeout(ctx, e.opt.Timeout)
	defer cancel()
	head := e.resultKey("")
	ask := int64(limit) + 1 // one more, to know whether there are more
	if ask <= 0 {
		ask = 0 // limit math.MaxInt: all
	}
	resp, err := e.cli.Get(rctx, head+prefix, clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend), clientv3.WithLimit(ask))
	if err != nil {
		return nil, false, e.unavailable(ctx, "stored results", err)
	}
	out := make([]lockcore.StoredResult, 0, min(len(resp.Kvs), limit))
	for _, kv := range resp.Kvs {
		key, err := lockcore.ParseKey(strings.TrimPrefix(string(kv.Key), head))
		s, ok := readResult(kv.Value)
		if err != nil || !ok {
			continue // not this engine's
		}
		out = append(out, lockcore.StoredResult{Key: key, Size: int64(len(s.res)), Expires: s.expires})
	}
	more := len(resp.Kvs) > limit || resp.More
	if len(out) > limit {
		out = out[:limit]
	}
	return out, more, nil
}

// errGone is why Keep stored nothing: the hold's key is gone from etcd
// (its lease ran out there, or it was released) and the result there, if
// any, is not the hold's.
var errGone = fmt.Errorf("%w: its key is no longer in etcd", lockcore.ErrLockLost)

// Keep implements lockcore.Results: it grants the result an etcd lease of
// keep, rounded up to whole seconds (a server grants at least its minimum
// lease, about two seconds by default), and then, in one transaction,
// while the hold's key is the one it created (its create revision) and
// the hold was not released, stores the result on that lease and deletes
// the hold's key, which frees the lock. When entries (re-entries by its
// owner token) hold the lock still, the transaction marks the hold
// released instead, as Release does, and the last entry's release frees
// it: the result is stored all the same, and the waiters find it when it
// is freed.
//
// The transaction stores nothing when the hold's key is gone or is
// another's; it then reads the result, and a result this hold stored (a
// Keep sent again after a lost reply) is success. Otherwise Keep fails
// with an error matching ErrLockLost (ErrRevoked for an operator's
// revocation).
//
// It waits for etcd up to Options.Timeout for each call. When etcd does
// not answer, it fails with an error matching ErrUnavailable and goes on
// in the background, with the result, every quarter of Options.Timeout,
// until etcd answers, the hold's session ends (its keys go with its
// lease) or the Engine closes: a plain release would free the lock
// without the result, for a duplicate to run again.
//
// h must be an exclusive hold of key that this Engine took afresh (not a
// re-entry by owner token), and keep a millisecond at least; otherwise
// Keep fails with an error matching ErrMisconfigured. A result of more
// than etcd's request limit (--max-request-bytes, 1.5 MiB by default)
// fails as etcd refuses it.
func (e *Engine) Keep(ctx context.Context, key lockcore.Key, t lockcore.Hold, res []byte, keep time.Duration) error {
	h, ok := t.(*hold)
	switch {
	case !ok || h.e != e:
		return fmt.Errorf("%w: etcdengine.Engine.Keep of a hold this Engine did not take", lockcore.ErrMisconfigured)
	case h.key != key:
		return fmt.Errorf("%w: etcdengine.Engine.Keep of a hold of another key", lockcore.ErrMisconfigured)
	case h.shared:
		return fmt.Errorf("%w: etcdengine.Engine.Keep of a shared hold: results are kept by exclusive holders only", lockcore.ErrMisconfigured)
	case h.entry != "":
		return fmt.Errorf("%w: etcdengine.Engine.Keep of a re-entry by owner token: results are kept by the hold that took the key", lockcore.ErrMisconfigured)
	case keep < time.Millisecond:
		return fmt.Errorf("%w: etcdengine.Engine.Keep for %v: keep it a millisecond at least", lockcore.ErrMisconfigured, keep)
	}
	if lost, _ := h.lostErr(); lost != nil && lost != errReleased && e.defect != "keepLost" {
		// Lost before: nothing is stored, and its keys go as Release's do.
		return h.Release(ctx, nil)
	}
	h.end(errReleased)
	k := &keeping{h: h, res: res, keep: keep}
	err := k.step(ctx)
	if errors.Is(err, lockcore.ErrUnavailable) && !e.closed.Load() {
		// The hold's session stays in use (and renewed) until the step
		// lands or the session ends.
		go k.again()
		return err
	}
	if h.unref.CompareAndSwap(false, true) {
		h.s.unref()
	}
	return err
}

// keeping is a Keep under way: its hold, result, and the lease granted
// for the result (0 before).
type keeping struct {
	h       *hold
	res     []byte
	keep    time.Duration
	lease   clientv3.LeaseID
	expires time.Time
}

// step runs Keep once, waiting for each call to etcd up to
// Options.Timeout.
func (k *keeping) step(ctx context.Context) error {
	h, e := k.h, k.h.e
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.opt.Timeout)
	defer cancel()
	if k.lease == 0 {
		secs := int64((k.keep + time.Second - 1) / time.Second)
		sent := time.Now()
		g, err := e.cli.Grant(rctx, secs)
		if err != nil {
			return e.unavailable(rctx, "keep", err)
		}
		k.lease, k.expires = g.ID, sent.Add(time.Duration(g.TTL)*time.Second)
	}
	err := e.keep(rctx, h, k.lease, resultValue(h.rev, k.expires, k.res))
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		// The lease granted before ran out while etcd did not answer:
		// the step is tried again, with a new one.
		k.lease = 0
	}
	return err
}

// again runs k's step in the background after a step that etcd did not
// answer, until one is answered, the hold's session ends or the Engine
// closes; then the hold no longer uses its session.
func (k *keeping) again() {
	h, e := k.h, k.h.e
	defer func() {
		if h.unref.CompareAndSwap(false, true) {
			h.s.unref()
		}
	}()
	for {
		t := time.NewTimer(e.opt.Timeout / 4)
		select {
		case <-e.ctx.Done():
			t.Stop()
			return
		case <-h.s.done:
			t.Stop()
			return
		case <-t.C:
		}
		if err := k.step(e.ctx); !errors.Is(err, lockcore.ErrUnavailable) {
			return
		}
	}
}

// keep stores the result value v on lease, and releases h, in one
// transaction (Keep).
func (e *Engine) keep(ctx context.Context, h *hold, lease clientv3.LeaseID, v string) error {
	key := h.key.String()
	rk := e.resultKey(key)
	ents := e.entries(key, h.token)
	mark := e.released(key, h.token)
	resp, err := e.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(h.holder), "=", h.rev),
			clientv3.Compare(clientv3.CreateRevision(mark), "=", 0)).
		Then(clientv3.OpPut(rk, v, clientv3.WithLease(lease)),
			clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Version(ents).WithPrefix(), "=", 0)},
				[]clientv3.Op{clientv3.OpDelete(h.holder)},
				[]clientv3.Op{clientv3.OpPut(mark, "", clientv3.WithLease(h.s.id))})).
		Else(e.keepElse(rk, h, lease, v)...).
		Commit()
	if err != nil {
		return e.unavailable(ctx, "keep", err)
	}
	if resp.Succeeded {
		if resp.Responses[1].GetResponseTxn().GetSucceeded() {
			return nil
		}
		// Entries hold it: the last of them frees it.
		return e.finish(ctx, h.holder, h.rev, ents, mark)
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		if s, ok := readResult(kvs[0].Value); ok && s.rev == h.rev && e.defect != "keepForget" {
			// Its own, stored by this Keep before (a lost reply).
			if resp.Responses[1].GetResponseRange().Count > 0 {
				return e.finish(ctx, h.holder, h.rev, ents, mark)
			}
			return nil
		}
	}
	return e.revoked(h.key, h.fence, errGone)
}

// keepElse is what keep's transaction does when the hold no longer holds
// its key: it reads the result and the hold's key.
func (e *Engine) keepElse(rk string, h *hold, lease clientv3.LeaseID, v string) []clientv3.Op {
	ops := []clientv3.Op{clientv3.OpGet(rk), clientv3.OpGet(h.holder, clientv3.WithCountOnly())}
	if e.defect == "keepLost" {
		ops = append(ops, clientv3.OpPut(rk, v, clientv3.WithLease(lease)))
	}
	return ops
}

var _ lockcore.Results = (*Engine)(nil)
