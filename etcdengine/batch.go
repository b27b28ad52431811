package etcdengine

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routelock/lock/lockcore"
)

// maxTxnOps is the most operations etcd takes in one transaction by
// default (its --max-txn-ops). A transaction nested in another may have
// as many as the outer one leaves.
const maxTxnOps = 128

// maxSet is the most keys of a set TakeAll takes, or ReleaseAll gives up,
// in one transaction: the withdrawal and the release of n keys send n
// transactions of up to two comparisons each, nested in one.
const maxSet = maxTxnOps - 2

// TakeAll implements lockcore.Batch: it writes the queue keys of every
// request of rs in one transaction, so that the set is queued all or
// none, at one revision, behind every key queued before it on each lock.
//
// When every lock is free, that transaction takes them all. When one is
// held, a fail-fast set writes nothing and fails with its
// *ContentionError; a waiting set is queued, waits for each of its keys'
// predecessors to go (watching the key queued just before its own, as
// Take does), and is granted by one more transaction, whose revision is
// every hold's fencing token. A wait that gives up deletes all its keys.
//
// It declines (nil, nil) a set of more than 126 keys, whose transactions
// would need more than etcd's default of 128 operations, a set with
// shared holds, a set whose requests carry propagated owner tokens
// (Join), which may re-enter holds, and a set that wants stored results
// (Request.Result): the Locker then takes them one by one.
func (e *Engine) TakeAll(ctx context.Context, rs []lockcore.Request) ([]lockcore.Hold, error) {
	if e.closed.Load() {
		return nil, lockcore.ErrClosed
	}
	if len(rs) < 2 || len(rs) > maxSet {
		return nil, nil
	}
	for _, r := range rs {
		// Shared holds, and a request that may re-enter a hold (or ask a
		// reader's token for the exclusive lock), are Take's.
		// So is one that wants a stored result.
		if r.Share != 0 || len(r.Join) > 0 || r.Result || r.Token == "" || r.Token[0] < ' ' {
			return nil, nil
		}
	}
	ss := make([]*session, len(rs))
	qs, mines := make([]string, len(rs)), make([]string, len(rs))
	for i, r := range rs {
		ttl := r.TTL
		if ttl == 0 {
			ttl = e.opt.TTL
		}
		s, err := e.session(ctx, ttl)
		if err != nil {
			return nil, err
		}
		defer s.unref()
		ss[i] = s
		qs[i] = e.queue(r.Key.String())
		mines[i] = qs[i] + r.Token
	}
	for {
		// All free: take them at once. One held: see by whom, writing
		// nothing.
		var (
			free = make([]clientv3.Cmp, len(rs))
			puts = make([]clientv3.Op, len(rs))
			gets = make([]clientv3.Op, len(rs))
		)
		for i, r := range rs {
			free[i] = clientv3.Compare(clientv3.Version(qs[i]).WithPrefix(), "=", 0)
			puts[i] = clientv3.OpPut(mines[i], e.record(r, false), clientv3.WithLease(ss[i].id))
			gets[i] = clientv3.OpGet(qs[i], clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
		}
		cctx, cancel := e.call(ctx)
		resp, err := e.cli.Txn(cctx).If(free...).Then(puts...).Else(gets...).Commit()
		cancel()
		if err != nil {
			// They may have been written all the same: locks held by no one.
			e.abandonAll(ss, mines, timedOut(err))
			return nil, e.unavailable(ctx, "take", err)
		}
		rev := resp.Header.Revision
		if resp.Succeeded {
			return e.heldAll(ss, rs, mines, rev, rev), nil
		}
		busy := -1
		for i := range rs {
			if len(resp.Responses[i].GetResponseRange().Kvs) > 0 {
				busy = i
				break
			}
		}
		if busy < 0 {
			continue // released meanwhile
		}
		if rs[0].Wait < 0 {
			return nil, &lockcore.ContentionError{Key: rs[busy].Key.String(), RetryAfter: 100 * time.Millisecond}
		}
		return e.waitAll(ctx, ss, rs, qs, mines)
	}
}

// waitAll queues the set rs, writing the keys mines in one transaction,
// and waits up to its Wait for every key queued before each of them to go.
func (e *Engine) waitAll(ctx context.Context, ss []*session, rs []lockcore.Request, qs, mines []string) ([]lockcore.Hold, error) {
	absent := make([]clientv3.Cmp, len(rs))
	puts := make([]clientv3.Op, len(rs))
	for i, r := range rs {
		absent[i] = clientv3.Compare(clientv3.CreateRevision(mines[i]), "=", 0)
		puts[i] = clientv3.OpPut(mines[i], e.record(r, true), clientv3.WithLease(ss[i].id))
	}
	cctx, cancel := e.call(ctx)
	resp, err := e.cli.Txn(cctx).If(absent...).Then(puts...).Commit()
	cancel()
	if err != nil {
		e.abandonAll(ss, mines, timedOut(err))
		return nil, e.unavailable(ctx, "queue", err)
	}
	if !resp.Succeeded {
		return nil, fmt.Errorf("%w: an owner token queued twice for one of %d keys", lockcore.ErrMisconfigured, len(rs))
	}
	rev := resp.Header.Revision
	timer := time.NewTimer(rs[0].Wait)
	defer timer.Stop()
	for i, r := range rs {
		waiting, waited := e.waitingFor(r.Key)
		err := e.awaitTurn(ctx, ss[i], r.Key, qs[i], clientv3.GetPrefixRangeEnd(qs[i]), rev, timer.C, waiting, nil)
		waited()
		if err != nil {
			// A cancelled wait leaves none of its keys behind (etcd#9715).
			e.withdrawAll(ss, mines, rev, errors.Is(err, lockcore.ErrUnavailable))
			return nil, err
		}
	}
	// First on every lock: write every key once more, so that the fencing
	// token, this write's revision, is above every revision before it.
	for i, r := range rs {
		absent[i] = clientv3.Compare(clientv3.CreateRevision(mines[i]), "=", rev)
		puts[i] = clientv3.OpPut(mines[i], e.record(r, true), clientv3.WithLease(ss[i].id))
	}
	cctx, cancel = e.call(ctx)
	resp, err = e.cli.Txn(cctx).If(absent...).Then(puts...).Commit()
	cancel()
	if err != nil {
		e.withdrawAll(ss, mines, rev, true)
		return nil, e.unavailable(ctx, "grant", err)
	}
	if !resp.Succeeded {
		// A key went with its session, or an operator removed it.
		e.withdrawAll(ss, mines, rev, false)
		return nil, fmt.Errorf("%w: etcd lost a queued acquisition of %d keys", lockcore.ErrUnavailable, len(rs))
	}
	return e.heldAll(ss, rs, mines, rev, resp.Header.Revision), nil
}

// heldAll makes the holds of rs, whose keys mines were created at rev
// and granted at fence.
func (e *Engine) heldAll(ss []*session, rs []lockcore.Request, mines []string, rev, fence int64) []lockcore.Hold {
	hs := make([]lockcore.Hold, len(rs))
	for i, r := range rs {
		hs[i] = e.held(ss[i], r.Key, mines[i], r.Token, rev, fence, "", false)
	}
	return hs
}

// abandonAll abandons the keys mines, each on its session of ss.
func (e *Engine) abandonAll(ss []*session, mines []string, later bool) {
	for i, m := range mines {
		e.abandon(ss[i], m, later)
	}
}

// withdrawAll deletes the keys mines of a set's wait that gave up, on
// the sessions ss, each if it is still the one created at rev, in one
// transaction (clean): later, in the background, when etcd did not
// answer a call of the wait, for which the caller is not to wait once
// more.
func (e *Engine) withdrawAll(ss []*session, mines []string, rev int64, later bool) {
	if e.defect == "keepWaiter" {
		return
	}
	ops := make([]clientv3.Op, len(mines))
	for i, m := range mines {
		ops[i] = guardedDelete(m, rev)
	}
	e.clean(ss, later, ops...)
}

// guardedDelete is an operation that deletes key only while its create
// revision is rev: a retried delete never removes a newer key of that
// name (etcd#22082).
func guardedDelete(key string, rev int64, more ...clientv3.Cmp) clientv3.Op {
	cmps := append([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", rev)}, more...)
	return clientv3.OpTxn(cmps, []clientv3.Op{clientv3.OpDelete(key)}, nil)
}

// ReleaseAll implements lockcore.Batch: the holder keys of hs, up to 126
// at a time, are deleted in one transaction, each only while its create
// revision is its hold's and no re-entry by its token holds it (a
// retried release never removes a newer hold). A hold that re-entered
// another's, or whose holder key that transaction left (re-entries hold
// it, or it is gone), is released as its Release would.
func (e *Engine) ReleaseAll(ctx context.Context, hs []lockcore.Hold) []error {
	errs := make([]error, len(hs))
	var (
		batch []*hold
		at    []int
	)
	for i, t := range hs {
		h, ok := t.(*hold)
		if !ok || h.e != e || h.entry != "" {
			errs[i] = t.Release(ctx, nil)
			continue
		}
		batch, at = append(batch, h), append(at, i)
	}
	for len(batch) > 0 {
		n := min(len(batch), maxSet)
		for j, err := range e.releaseTogether(ctx, batch[:n]) {
			errs[at[j]] = err
		}
		batch, at = batch[n:], at[n:]
	}
	return errs
}

// releaseTogether releases holder holds hs, at most maxSet, in one
// transaction (see ReleaseAll).
func (e *Engine) releaseTogether(ctx context.Context, hs []*hold) []error {
	errs := make([]error, len(hs))
	lost := make([]error, len(hs))
	ops := make([]clientv3.Op, len(hs))
	for i, h := range hs {
		lost[i], _ = h.lostErr()
		h.end(errReleased)
		ents := e.entries(h.key.String(), h.token)
		ops[i] = guardedDelete(h.holder, h.rev, clientv3.Compare(clientv3.Version(ents).WithPrefix(), "=", 0))
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.opt.Timeout)
	defer cancel()
	resp, err := e.cli.Txn(rctx).Then(ops...).Commit()
	for i, h := range hs {
		switch {
		case err != nil:
			errs[i] = e.unavailable(rctx, "release", err)
		case !resp.Responses[i].GetResponseTxn().GetSucceeded():
			errs[i] = h.release(ctx) // re-entries hold it, or it is gone
		}
		if lost[i] != nil && lost[i] != errReleased {
			errs[i] = lost[i]
		}
	}
	return errs
}

var _ lockcore.Batch = (*Engine)(nil)
