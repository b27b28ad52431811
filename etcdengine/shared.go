package etcdengine

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routelock/lock/lockcore"
)

// takeShared takes r.Key for a reader (Share -1) on session s: at once
// when no writer is queued or holds, by re-entry when a token of r.Join
// holds it (a reader's hold, or the writer's), and otherwise, waiting,
// once no writer's key was created before its own.
func (e *Engine) takeShared(ctx context.Context, s *session, r lockcore.Request) (lockcore.Hold, error) {
	key := r.Key.String()
	q := e.queue(key)
	mine := e.reader(key, r.Token)
	from, end := e.writers(key)
	for {
		// No writer and no reader of a token of r's: take it at once.
		// Otherwise see the first writer, the first key, and r's tokens'
		// readers' keys, writing nothing.
		cond := []clientv3.Cmp{clientv3.Compare(clientv3.Version(from).WithRange(end), "=", 0)}
		orElse := []clientv3.Op{
			clientv3.OpGet(from, clientv3.WithRange(end), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1)),
			clientv3.OpGet(q, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1)),
		}
		for _, j := range r.Join {
			cond = append(cond, clientv3.Compare(clientv3.CreateRevision(e.reader(key, j)), "=", 0))
			orElse = append(orElse, clientv3.OpGet(e.reader(key, j)))
		}
		cond, orElse = e.unlessResult(r, cond, orElse)
		cctx, cancel := e.call(ctx)
		resp, err := e.cli.Txn(cctx).If(cond...).
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
			return e.held(s, r.Key, mine, r.Token, rev, rev, "", true), nil
		}
		if err := e.resultIn(r, resp, len(orElse)-1); err != nil {
			return nil, err
		}
		// A reader of r's token: re-enter its hold.
		for i, j := range r.Join {
			if kvs := resp.Responses[2+i].GetResponseRange().Kvs; len(kvs) > 0 {
				h, err := e.reenter(ctx, s, r, kvs[0], j)
				if h != nil || err != nil {
					return h, err
				}
			}
		}
		writer, first := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
		if len(writer) == 0 {
			continue // the writer went, or the reader re-entered, meanwhile
		}
		// The writer holds for a token of r's: re-enter its hold.
		if tok := readRecord(writer[0].Value).Token; joins(r.Join, tok) && len(first) > 0 && string(first[0].Key) == string(writer[0].Key) {
			h, err := e.reenter(ctx, s, r, writer[0], tok)
			if h != nil || err != nil {
				return h, err
			}
			continue
		}
		if r.Wait < 0 {
			return nil, &lockcore.ContentionError{Key: key, RetryAfter: 100 * time.Millisecond}
		}
		return e.wait(ctx, s, r, mine, from, end)
	}
}

// holders returns, of a lock's queue sorted by create revision, the keys
// that hold it: the first, when it is a writer's; else the readers before
// the first writer.
func (e *Engine) holders(key string, queue [][]byte) int {
	if len(queue) == 0 {
		return 0
	}
	if !e.isReader(key, queue[0]) {
		return 1
	}
	n := 0
	for n < len(queue) && e.isReader(key, queue[n]) {
		n++
	}
	return n
}
