package etcdengine

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routelock/lock/lockcore"
)

// record is what a key of the queue or an entry holds: who took it, for
// operators; never shown with its token.
type record struct {
	Token    string `json:"t"`
	Instance string `json:"i"`
	Name     string `json:"n,omitempty"`
	Route    string `json:"r,omitempty"`
	Trace    string `json:"x,omitempty"`
	Since    int64  `json:"s"`           // when it was written, Unix ms, by the engine's clock
	Deadline int64  `json:"d,omitempty"` // a waiter's, Unix ms
	Waited   bool   `json:"w,omitempty"` // it queued: Since is when it began to wait
}

// record returns the record of r, as a waiter's when waiting.
func (e *Engine) record(r lockcore.Request, waiting bool) string {
	now := time.Now()
	rec := record{Token: r.Token, Instance: e.instance, Name: e.opt.Name, Route: r.Route, Trace: r.Trace, Since: now.UnixMilli(), Waited: waiting}
	if waiting && r.Wait > 0 {
		rec.Deadline = now.Add(r.Wait).UnixMilli()
	}
	b, _ := json.Marshal(rec)
	return string(b)
}

// readRecord reads a key's record; a record it cannot read is the zero one.
func readRecord(v []byte) record {
	var rec record
	_ = json.Unmarshal(v, &rec)
	return rec
}

// owner is the digest operators see for an owner token.
func owner(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:6])
}

// newInstance returns a random engine id.
func newInstance() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// defaultName is an Engine's instance name when Options.Name is empty.
func defaultName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// audit returns the prefix of key's revocation records, and the record of
// the hold with fencing token fence.
func (e *Engine) audit(key string) string { return e.opt.Prefix + "a/" + key + "\x00" }
func (e *Engine) auditOf(key string, fence int64) string {
	return fmt.Sprintf("%s%020d", e.audit(key), fence)
}

// auditKeep is how many revocations of a key are kept.
const auditKeep = 100

// revoked is why a hold of key with fencing token fence ended when its key
// was deleted: an operator's revocation, when one was recorded for it, or
// else err.
func (e *Engine) revoked(key lockcore.Key, fence int64, err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), e.opt.Timeout)
	defer cancel()
	resp, gerr := e.cli.Get(ctx, e.auditOf(key.String(), fence))
	if gerr != nil || len(resp.Kvs) == 0 {
		return err
	}
	var rev lockcore.Revocation
	_ = json.Unmarshal(resp.Kvs[0].Value, &rev)
	return fmt.Errorf("%w: %s", lockcore.ErrRevoked, rev.Reason)
}

// Inspect implements lockcore.Operator.
func (e *Engine) Inspect(ctx context.Context, key lockcore.Key) (lockcore.Info, error) {
	k := key.String()
	info := lockcore.Info{Key: k}
	resp, err := e.cli.Txn(ctx).Then(
		clientv3.OpGet(e.queue(k), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)),
		clientv3.OpGet(e.audit(k), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(auditKeep)),
	).Commit()
	if err != nil {
		return info, e.unavailable(ctx, "inspect", err)
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		var rev lockcore.Revocation
		if json.Unmarshal(kv.Value, &rev) == nil {
			rev.NewFence = kv.ModRevision
			info.Audit = append(info.Audit, rev)
			info.LastFence = max(info.LastFence, rev.NewFence)
		}
	}
	queue := resp.Responses[0].GetResponseRange().Kvs
	if len(queue) == 0 {
		return info, nil
	}
	n := e.holders(k, keysOf(queue))
	for _, holder := range queue[:n] {
		rec := readRecord(holder.Value)
		h := lockcore.Holder{Owner: owner(rec.Token), Count: 1, Instances: []string{rec.Instance}, Names: []string{rec.Name},
			Route: rec.Route, Trace: rec.Trace, Fence: holder.ModRevision, Slot: -1}
		if e.isReader(k, holder.Key) {
			h.Share = -1
		}
		if !rec.Waited {
			h.Since = time.UnixMilli(rec.Since)
		}
		ents, err := e.cli.Get(ctx, e.entries(k, rec.Token), clientv3.WithPrefix())
		if err != nil {
			return info, e.unavailable(ctx, "inspect", err)
		}
		for _, kv := range ents.Kvs {
			er := readRecord(kv.Value)
			h.Count++
			h.Instances, h.Names = append(h.Instances, er.Instance), append(h.Names, er.Name)
		}
		info.Holders = append(info.Holders, h)
		info.Fence = max(info.Fence, holder.ModRevision)
	}
	info.LastFence = max(info.LastFence, info.Fence)
	if ttl, err := e.cli.TimeToLive(ctx, clientv3.LeaseID(queue[0].Lease)); err == nil && ttl.TTL > 0 {
		info.TTL = time.Duration(ttl.TTL) * time.Second
	}
	for _, kv := range queue[n:] {
		w := readRecord(kv.Value)
		wt := lockcore.Waiter{Instance: w.Instance, Name: w.Name, Route: w.Route, Trace: w.Trace, Since: time.UnixMilli(w.Since)}
		if w.Deadline > 0 {
			wt.Deadline = time.UnixMilli(w.Deadline)
		}
		info.Waiters = append(info.Waiters, wt)
	}
	return info, nil
}

// keysOf returns the keys of kvs.
func keysOf(kvs []*mvccpb.KeyValue) [][]byte {
	out := make([][]byte, len(kvs))
	for i, kv := range kvs {
		out[i] = kv.Key
	}
	return out
}

// List implements lockcore.Operator: the locks held or awaited whose key
// starts with prefix, in key order.
func (e *Engine) List(ctx context.Context, prefix string, limit int) ([]lockcore.Info, bool, error) {
	resp, err := e.cli.Get(ctx, e.opt.Prefix+"q/"+prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, false, e.unavailable(ctx, "list", err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		k := strings.TrimPrefix(string(kv.Key), e.opt.Prefix+"q/")
		if i := strings.IndexByte(k, 0); i >= 0 {
			k = k[:i]
		}
		if len(keys) == 0 || keys[len(keys)-1] != k {
			keys = append(keys, k)
		}
	}
	more := limit > 0 && len(keys) > limit
	if more {
		keys = keys[:limit]
	}
	out := make([]lockcore.Info, 0, len(keys))
	for _, k := range keys {
		key, err := lockcore.ParseKey(k)
		if err != nil {
			continue // not a key of this engine's
		}
		info, err := e.Inspect(ctx, key)
		if err != nil {
			return nil, false, err
		}
		if len(info.Holders) > 0 || len(info.Waiters) > 0 {
			out = append(out, info)
		}
	}
	return out, more, nil
}

// Revoke implements lockcore.Operator: it deletes the holder key of key
// (every reader's, for a shared lock, up to maxRevoke in one transaction)
// and its entries, in one transaction with the audit records, so that the
// holds' watches end their leases with ErrRevoked and the next waiter is
// granted the lock, with a fencing token above the revocation's revision
// (NewFence).
func (e *Engine) Revoke(ctx context.Context, key lockcore.Key, reason string) (lockcore.Revocation, error) {
	if err := checkReason(reason); err != nil {
		return lockcore.Revocation{}, err
	}
	k := key.String()
	var done lockcore.Revocation
	for range 8 {
		resp, err := e.cli.Get(ctx, e.queue(k), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(maxRevoke+1))
		if err != nil {
			return lockcore.Revocation{}, e.unavailable(ctx, "revoke", err)
		}
		n := e.holders(k, keysOf(resp.Kvs))
		if n == 0 {
			if done.Key != "" {
				return done, nil
			}
			return lockcore.Revocation{}, fmt.Errorf("%w: %s", lockcore.ErrNotHeld, k)
		}
		more := n > maxRevoke
		n = min(n, maxRevoke)
		var (
			cmps []clientv3.Cmp
			ops  []clientv3.Op
			rev  lockcore.Revocation
		)
		for i, holder := range resp.Kvs[:n] {
			rec := readRecord(holder.Value)
			one := lockcore.Revocation{Key: k, Owner: owner(rec.Token), Fence: holder.ModRevision, Reason: reason, At: time.Now()}
			if i == 0 {
				rev = one
			}
			rev.Fence = max(rev.Fence, one.Fence)
			b, _ := json.Marshal(one)
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(string(holder.Key)), "=", holder.CreateRevision),
				clientv3.Compare(clientv3.ModRevision(string(holder.Key)), "=", holder.ModRevision))
			ops = append(ops, clientv3.OpPut(e.auditOf(k, one.Fence), string(b)),
				clientv3.OpDelete(string(holder.Key)),
				clientv3.OpDelete(e.entries(k, rec.Token), clientv3.WithPrefix()),
				clientv3.OpDelete(e.released(k, rec.Token)))
		}
		tr, err := e.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return lockcore.Revocation{}, e.unavailable(ctx, "revoke", err)
		}
		if tr.Succeeded {
			rev.NewFence = tr.Header.Revision
			e.trimAudit(ctx, k)
			if !more {
				return rev, nil
			}
			done = rev // more readers hold: revoke them too
		}
		// Released or granted anew meanwhile: look again.
	}
	return lockcore.Revocation{}, fmt.Errorf("%w: the hold of %s kept changing", lockcore.ErrUnavailable, k)
}

// maxRevoke is the most holders (readers) Revoke deletes in one
// transaction: four operations each, within etcd's default of 128.
const maxRevoke = 30

// trimAudit keeps the newest auditKeep revocations of key.
func (e *Engine) trimAudit(ctx context.Context, k string) {
	resp, err := e.cli.Get(ctx, e.audit(k), clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend))
	if err != nil || len(resp.Kvs) <= auditKeep {
		return
	}
	for _, kv := range resp.Kvs[auditKeep:] {
		_, _ = e.cli.Delete(ctx, string(kv.Key))
	}
}

// checkReason returns an error matching ErrInvalidReason for a reason
// that is empty, longer than 256 bytes, not UTF-8, or has control
// characters.
func checkReason(reason string) error {
	bad := reason == "" || len(reason) > 256 || !utf8.ValidString(reason) ||
		strings.IndexFunc(reason, unicode.IsControl) >= 0
	if bad {
		return fmt.Errorf("%w: %q", lockcore.ErrInvalidReason, reason)
	}
	return nil
}

var _ lockcore.Operator = (*Engine)(nil)
