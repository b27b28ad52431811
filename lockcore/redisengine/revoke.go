package redisengine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/operate"
	"github.com/routelock/lock/lockcore"
)

// auditKeep is about how many audit records a key's stream keeps (XADD
// MAXLEN ~).
const auditKeep = 100

// revokeRecordTTL is how long the record of a Revoke call is kept in
// Redis, so that the client re-sending the call (after a lost reply) finds
// it and the call takes effect once: far longer than any client retries.
const revokeRecordTTL = time.Hour

// Revoke implements lockcore.Operator: it force-releases the hold of key,
// whoever holds it, for reason, in one atomic script. The hold is deleted
// from Redis; its entries are remembered (for as long as the hold would
// have lived) so that its holders' next renewal, or their release, answers
// that it was revoked: their lease contexts are cancelled with cause
// lockcore.ErrRevoked, at once when the holding Engine hears the
// revocation on its notification channel, and at their next renewal (about
// a third of their TTL) at the latest. The key's last fencing token moves
// past the revoked hold's fence (Revocation.NewFence); the next waiter, if
// any, is granted the lock, with a fencing token above NewFence, as a
// release would grant it. An audit record (the owner's digest, the fences,
// the reason, the time by Redis's clock) is appended to the key's audit
// stream, which keeps about the latest 100 records for
// Options.AuditRetention, and the Logger, if any, is told.
//
// It returns lockcore.ErrNotHeld when nobody holds the lock, an error
// matching lockcore.ErrInvalidKey for the zero Key, one matching
// lockcore.ErrInvalidReason for a reason that is empty, longer than 256
// bytes, not UTF-8, or has control characters, lockcore.ErrClosed after Close, and one matching
// lockcore.ErrUnavailable when Redis did not answer: the hold may or may
// not have been revoked then (Inspect says). A call that the client sent
// again after a lost reply takes effect once: it revokes the hold its first
// run found, or, if that run found the lock free, nothing, and returns what
// the first run did.
func (l *Engine) Revoke(ctx context.Context, key lockcore.Key, reason string) (lockcore.Revocation, error) {
	return l.revoke(ctx, key, reason, true)
}

// revoke is Revoke; tell says whether the holding Engines are told at
// once, or find out at their next renewal.
func (l *Engine) revoke(ctx context.Context, key lockcore.Key, reason string, tell bool) (lockcore.Revocation, error) {
	if key == (lockcore.Key{}) {
		return lockcore.Revocation{}, fmt.Errorf("%w: zero Key", lockcore.ErrInvalidKey)
	}
	if err := operate.CheckReason(reason); err != nil {
		return lockcore.Revocation{}, err
	}
	if l.closed.Load() {
		return lockcore.Revocation{}, lockcore.ErrClosed
	}
	ks := l.redisKeys(key)
	channels := ""
	if tell {
		channels = l.opt.Prefix + "notify:"
	}
	// The call's record, in the lock's slot, named by a random id.
	var op [16]byte
	_, _ = rand.Read(op[:])
	record := ks[0] + ":o:" + hex.EncodeToString(op[:])
	cmds := []redis.Cmder{l.run.cmd(ctx, revokeScript, []any{nil, nil, 8, ks[0], ks[1], ks[2], ks[3], ks[4], record, ks[5], ks[6],
		l.retArg, channels, l.claimArg, l.trustArg, reason, ms(l.opt.AuditRetention), auditKeep, operate.OwnerSalt,
		ms(revokeRecordTTL)})}
	_ = l.run.run(ctx, cmds)
	v, err := cmds[0].(*redis.Cmd).Result()
	if err != nil {
		return lockcore.Revocation{}, unavailable("revoke", err)
	}
	if n, ok := v.(int64); ok && n == 0 {
		return lockcore.Revocation{}, lockcore.ErrNotHeld
	}
	r, ok := revocation(key.String(), reason, v)
	if !ok {
		return lockcore.Revocation{}, fmt.Errorf("%w: revoke: unexpected reply %v", lockcore.ErrUnavailable, v)
	}
	if lg := l.opt.Logger; lg != nil {
		lg.Info("routelock: a lock was revoked by an operator", "resource", key.Name(), "reason", reason,
			"owner", r.Owner, "fence", r.Fence, "new_fence", r.NewFence)
	}
	return r, nil
}

// revocation reads the revoke script's reply v: {fence, new fence, owner
// digest, time in µs}, all strings.
func revocation(key, reason string, v any) (lockcore.Revocation, bool) {
	a, ok := v.([]any)
	if !ok || len(a) != 4 {
		return lockcore.Revocation{}, false
	}
	var s [4]string
	for i := range s {
		if s[i], ok = a[i].(string); !ok {
			return lockcore.Revocation{}, false
		}
	}
	fence, err1 := strconv.ParseInt(s[0], 10, 64)
	newFence, err2 := strconv.ParseInt(s[1], 10, 64)
	at, err3 := strconv.ParseInt(s[3], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return lockcore.Revocation{}, false
	}
	return lockcore.Revocation{Key: key, Owner: s[2], Fence: fence, NewFence: newFence, Reason: reason, At: unixMicro(at)}, true
}
