package redisengine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/lockcore"
)

// Options configures an Engine. The zero value of every field means its
// default.
type Options struct {
	// Prefix starts every Redis key and channel the Engine uses. It must not
	// contain '{', '}', spaces, tabs or line breaks. Default: "routelock:".
	Prefix string

	// Name is the instance name operators know the Engine by: the pod,
	// host or process it runs in. Inspect and List (package admin, the
	// routelock command) show it beside the Engine's holds and waiters
	// (lockcore.Holder.Names, lockcore.Waiter.Name), with the route and
	// trace id of each (lock.Policy.Route, Policy.Trace), and the
	// Logger's lines carry it as "instance". The Engine keeps them in
	// Redis, in a hash "<Prefix>engine:<engine id>", for the holds and
	// waiters that have lasted a third of the TTL (at least 100ms, at most
	// a second; a shorter hold shows its engine id alone), which it finds
	// within twice that: a background
	// goroutine rewrites the hash, in one MULTI, when that set changes, at
	// most once per such period, and refreshes it every 30 seconds while
	// the set is not empty; it expires 90 seconds after the last write.
	// None of it is on an acquisition's path: an acquisition costs no
	// extra command or byte. At most 128 bytes of UTF-8 without control
	// characters. Default: "<hostname>-<pid>", as os.Hostname and
	// os.Getpid say.
	Name string

	// TTL is the lease length when a Policy gives none. The watchdog renews
	// a held lease about every TTL/3; a holder cut off from Redis learns the
	// lease is lost after about 0.9×TTL. Minimum 30ms, at most MaxTTL.
	// Default: 10s.
	TTL time.Duration

	// MaxTTL bounds every lease the Engine grants: an acquisition whose
	// Policy asks for a longer TTL fails with lockcore.ErrMisconfigured.
	// It is also how long the restart guard keeps fresh holds out after a
	// server without an append-only file starts (see "What Redis must
	// promise" in the package documentation): the holds such a server
	// lost may be any Engine's, so the guard must outlast the longest
	// lease any Engine on the server may have granted, which the server no
	// longer remembers. Every Engine on one server must therefore have the
	// same MaxTTL (or the largest one the first to meet the restart): an
	// Engine with a longer one lengthens a guard it finds, but not one that
	// has already ended. Lower it (on every Engine) to shorten the guard,
	// raise it for longer leases. Minimum 30ms. Default: 30s.
	MaxTTL time.Duration

	// FenceRetention is how long a key's last fencing token is kept after
	// the Redis server's clock has passed it. A token is that clock (four
	// per microsecond since 2009-08-11), or one more than the last token
	// when that is greater, and never more than 100µs ahead of the clock,
	// so tokens increase as long as that clock does not step back by more
	// than this, and across a failover as long as the new master's clock
	// is not behind the old one's by more than the failover took, less
	// 100µs. Default: 1h.
	FenceRetention time.Duration

	// ReleaseTimeout bounds how long a release, and the withdrawal of a
	// waiter that gave up, keep their caller waiting, whatever the client's
	// own timeouts and retries. Both run detached from the caller's
	// cancellation, so that a request cancelled after it acquired still
	// releases; a release not answered in time goes on in the background.
	// Default: 2s.
	ReleaseTimeout time.Duration

	// Timeout bounds how long an acquisition waits for Redis to answer one
	// call, whatever the client's own timeouts and retries (go-redis at its
	// defaults retries three times after 3 s read timeouts, and ignores
	// context deadlines unless ContextTimeoutEnabled is set). An acquisition
	// whose call is not answered in time, or by its context's deadline,
	// fails with ErrUnavailable, and the call is withdrawn once it lands.
	// Default: 1s.
	Timeout time.Duration

	// ClaimWindow bounds how long a waiter that vanished (killed, paused, cut
	// off, or returned while its withdrawal could not reach Redis) can keep
	// a released lock from the next live waiter. A release grants a waiter
	// the lock for 3/5 of the window,
	// within which the waiter claims it for its whole TTL; waiters ask Redis
	// again at least every 3/10 of the window, so a live waiter whose
	// notification was lost still claims its grant in time. When Redis is one
	// server (a *redis.Client, not a Cluster), a waiter whose process is gone
	// is skipped at once. At least 30ms. Default: 1s.
	ClaimWindow time.Duration

	// OnReleaseError, if set, is called when a release fails or goes
	// unanswered (Redis unreachable), with the lock's key and the error,
	// before the release is retried in the background: every retry
	// interval (a tenth of the lease, at most a second), idempotently,
	// until the lease would have expired in Redis anyway. It must not
	// block. The Logger, if set, is told too.
	OnReleaseError func(key lockcore.Key, err error)

	// Logger, if set, is told: once when Redis says the engine is set up
	// wrongly (lockcore.ErrMisconfigured: a wrong password, a database out
	// of range, a server too old); when Redis stops answering and when it
	// answers again (once per transition, not per request, from whichever
	// call of the Engine's meets it first, renewals and the notification
	// subscription included: see Logging in the package doc, which says
	// too how to quiet go-redis's own log); when a lease
	// is lost while its holder runs, and why; when a release fails (see
	// OnReleaseError). Lines name the resource (a key's first part, such as
	// productID), never a key's values or a token; they carry the Engine's
	// Name as "instance", and a lost or unreleased hold's route and trace
	// id (lock.Policy.Route, Policy.Trace) as "route" and "trace".
	// Default: nil, silent.
	Logger *slog.Logger

	// Events, if set, is told what the engine does: waits starting and
	// ending, waiters woken and by what, renewals and their outcome. The
	// ends of holds (released, lost, revoked) and how long they lasted are
	// told by the Locker (lock.New gives it the same Events). Package
	// lockotel turns them into OpenTelemetry metrics and spans. Default:
	// nil, which costs nothing.
	//
	// The engine calls it from the goroutines of the acquisitions,
	// releases and renewals, never while it holds a lock of its own:
	//   - Waiting(+1) when an acquisition is queued behind another owner's
	//     hold, and Waiting(-1) once that acquisition returns, whatever it
	//     returns;
	//   - Woken each time a queued acquisition wakes, other than by its
	//     context or Close: to ask Redis again, to take the lock handed to
	//     it, or to give up when its wait ran out. "message" for a
	//     hand-over published to this Engine (by another Engine's release,
	//     or a revocation); "reply" for one found in the reply to a
	//     release by this Engine, and for a release or subscription whose
	//     reply says that a hand-over may have been missed; "timer" when
	//     its own timer (the holder's remaining lease, the polling interval
	//     of 3/10 of ClaimWindow, or its deadline) ran out; "memory"
	//     for a hold handed over in memory (LocalHandOvers);
	//   - Renewed for each renewal: nil when it extended the lease, an
	//     error matching ErrLockLost when it found the hold gone
	//     (ErrRevoked when revoked), one matching ErrUnavailable when Redis
	//     did not answer it; a renewal that found the hold gone because it
	//     was released meanwhile is not told;
	//   - Ended, by the Locker, once per fresh hold: after its release, or
	//     when it was lost (its lease ran out, Redis no longer had it, it
	//     was revoked, or the Engine closed). A hold whose release finds it
	//     revoked ends with cause ErrRevoked and a nil err.
	Events lockcore.Events

	// Replicas, when > 0, makes an acquisition count only once that many
	// replicas of the lock's master acknowledged it (Redis WAIT, sent after
	// the acquisition on its connection, within ReplicaTimeout). An
	// acquisition acknowledged by fewer gives its hold back and fails with
	// an error matching lockcore.ErrUnavailable (503 over HTTP, Unavailable
	// over gRPC). A waiter handed the lock claims it with a call of its own,
	// which is acknowledged the same way. With Replicas at least 1, a master
	// cut off from its replicas, or demoted in a failover while clients
	// still reach it, grants nothing; and a hold survives the failover of
	// its master as long as an acknowledging replica is the one promoted
	// (WAIT cannot say which replica acknowledged). A release that keeps a
	// result (Keep) is acknowledged the same way: one acknowledged by fewer
	// fails with ErrUnavailable, its result stored on the master, and is
	// sent again in the background. Renewals are not acknowledged. It
	// costs one WAIT per pipeline of acquisitions: the time the slowest of
	// the counted replicas takes to acknowledge. On a
	// Cluster each master's acquisitions go to that master's own
	// connection, with WAIT, and an acquisition whose slot is moving
	// (resharding) fails until it has moved. A shortfall is not an
	// outage: it is not logged as Redis unreachable.
	//
	// Default (0): 1 on a failover client (redis.NewFailoverClient:
	// Sentinel), whose master always has replicas, and in whose switch
	// window (from the promotion of a replica until every client has
	// moved to it) the old master and the new one would both grant
	// without it; off on one server and on a Cluster, whose coordinated
	// failover has no such window. It costs a WAIT per acquisition,
	// and hand-over in memory (LocalHandOvers), which a hold taken with
	// Replicas never does: see docs/deployments.md for the numbers. A
	// negative value turns it off.
	Replicas int

	// ReplicaTimeout bounds how long an acquisition waits for the
	// acknowledgements of Replicas. It must be shorter than Timeout, and
	// should be shorter than the client's ReadTimeout (go-redis: 3 s),
	// which a WAIT that blocks past it would hit. Default: 100ms.
	ReplicaTimeout time.Duration

	// LocalHandOvers lets a release hand an exclusive hold to a
	// waiter of the same Engine in memory (lock cohorting): the waiter runs
	// at once, without waiting for Redis, and one call in the background
	// then makes the hold the waiter's in Redis (its owner token, attempt
	// and a fencing token greater than the last holder's, from a block
	// each hold taken by Acquire reserves). At most LocalHandOvers such
	// hand-overs happen in a row (at most 15): the next release goes
	// through Redis, which gives the lock to its longest waiter, so that
	// waiters of other processes get their turn. The waiters of the same
	// Engine that may be handed a hold (exclusive ones without propagated
	// tokens) are served in the order they queued. A hold is not handed
	// over in memory when its owner token may have left the process
	// (lifecycle.TokensFrom, and so an outgoing call or another acquisition
	// under its context, or Lease.Token, was read while it was held:
	// another process could re-enter it by that token after its release),
	// nor one taken with a Policy's Share, re-entered under a propagated
	// token, or taken with Replicas set. Until a successor's call has
	// landed, its owner token is held back from lifecycle.TokensFrom (at
	// most Timeout), it is not renewed, and its release waits for the call
	// (at most ReleaseTimeout) unless it hands the hold on in memory. An
	// operator's Revoke names the hold Redis has: a successor still
	// running on a hold revoked before its call landed is told
	// ErrRevoked, with a fencing token between the revocation's Fence and
	// NewFence. A hold goes in memory only to a waiter whose caller has
	// not left, which then takes it even if its caller leaves before it
	// wakes (Acquire returns the lease), and to none whose lease could go
	// back unseen (lockcore.Request.Set), so that a successor is there to be
	// told. Default (0): 8. A negative value turns hand-over in memory
	// off: every release goes through Redis, to its longest waiter.
	LocalHandOvers int

	// AuditRetention is how long a key's audit records of revocations
	// (Revoke) are kept after the latest one; at most about the latest 100
	// are kept anyway. Default: 7 days.
	AuditRetention time.Duration

	// OperatorOnly makes the Engine an operator's: it lists, inspects and
	// force-releases locks and opens and closes gates (the routelock
	// command's Engine is one), but takes no lock: Acquire fails with
	// lockcore.ErrMisconfigured. It never decides the restart guard (see
	// "What Redis must promise" in the package documentation), which the
	// Engines that take locks decide with the MaxTTL they share: an
	// OperatorOnly Engine's own MaxTTL, which it does not know, would lengthen their
	// guard or, shorter, end it before their leases. Its RestartGuard
	// reads the guard they decided: 0 until one has.
	OperatorOnly bool
}

const (
	defaultPrefix         = "routelock:"
	defaultTTL            = 10 * time.Second
	defaultMaxTTL         = 30 * time.Second
	defaultFenceRetention = time.Hour
	defaultReleaseTimeout = 2 * time.Second
	defaultTimeout        = time.Second
	defaultClaimWindow    = time.Second
	defaultAuditRetention = 7 * 24 * time.Hour
	defaultReplicaTimeout = 100 * time.Millisecond
	// maxLocalHandOvers is the most LocalHandOvers may be: the fencing
	// tokens a hold reserves above its own (see fence_top in lua/hold.lua).
	maxLocalHandOvers = 15
	// defaultLocalHandOvers bounds a run of hand-overs in memory at 8:
	// nearly all of a busy key's hand-overs stay in the process (8 of 9),
	// and a waiter of another process waits at most 8 sections more than
	// strict arrival order would make it.
	defaultLocalHandOvers = 8
)

// withDefaults returns o with every default set, for a client whose
// deployment is replicated (a failover client) or not.
func (o Options) withDefaults(replicated bool) (Options, error) {
	if o.Prefix == "" {
		o.Prefix = defaultPrefix
	}
	if strings.ContainsAny(o.Prefix, "{} \t\r\n") {
		return o, fmt.Errorf("routelock: redisengine.Options.Prefix %q must not contain '{', '}', spaces or line breaks", o.Prefix)
	}
	if o.Name == "" {
		o.Name = defaultName()
	}
	if err := checkName(o.Name); err != nil {
		return o, err
	}
	if o.TTL == 0 {
		o.TTL = defaultTTL
	}
	if err := checkTTL(o.TTL); err != nil {
		return o, fmt.Errorf("%w (redisengine.Options.TTL)", err)
	}
	if o.MaxTTL == 0 {
		o.MaxTTL = defaultMaxTTL
	}
	if err := checkTTL(o.MaxTTL); err != nil {
		return o, fmt.Errorf("%w (redisengine.Options.MaxTTL)", err)
	}
	if o.TTL > o.MaxTTL {
		return o, fmt.Errorf("%w: redisengine.Options.TTL %v is longer than MaxTTL %v", lockcore.ErrMisconfigured, o.TTL, o.MaxTTL)
	}
	for _, d := range []struct {
		v    *time.Duration
		def  time.Duration
		name string
	}{
		{&o.FenceRetention, defaultFenceRetention, "FenceRetention"},
		{&o.ReleaseTimeout, defaultReleaseTimeout, "ReleaseTimeout"},
		{&o.Timeout, defaultTimeout, "Timeout"},
		{&o.AuditRetention, defaultAuditRetention, "AuditRetention"},
		{&o.ReplicaTimeout, defaultReplicaTimeout, "ReplicaTimeout"},
	} {
		if *d.v == 0 {
			*d.v = d.def
		}
		if *d.v < 0 {
			return o, fmt.Errorf("routelock: redisengine.Options: negative %s %v", d.name, *d.v)
		}
	}
	switch {
	case o.Replicas < 0:
		o.Replicas = 0 // off
	case o.Replicas == 0 && replicated:
		o.Replicas = 1
		if o.ReplicaTimeout >= o.Timeout {
			// A Timeout set shorter than the default ReplicaTimeout:
			// the WAIT gets half of it.
			o.ReplicaTimeout = max(o.Timeout/2, time.Millisecond)
		}
	}
	if o.Replicas > 0 && o.ReplicaTimeout >= o.Timeout {
		return o, fmt.Errorf("routelock: redisengine.Options: ReplicaTimeout %v must be shorter than Timeout %v, which bounds the acquisition's call, WAIT included", o.ReplicaTimeout, o.Timeout)
	}
	switch {
	case o.LocalHandOvers == 0:
		o.LocalHandOvers = defaultLocalHandOvers
	case o.LocalHandOvers < 0:
		o.LocalHandOvers = 0 // off
	case o.LocalHandOvers > maxLocalHandOvers:
		return o, fmt.Errorf("routelock: redisengine.Options: LocalHandOvers %d: it must be at most %d (or negative: off)", o.LocalHandOvers, maxLocalHandOvers)
	}
	if o.Replicas > 0 {
		o.LocalHandOvers = 0 // a successor's call is not acknowledged by replicas
	}
	if o.ClaimWindow == 0 {
		o.ClaimWindow = defaultClaimWindow
	}
	if err := checkTTL(o.ClaimWindow); err != nil {
		return o, fmt.Errorf("%w (redisengine.Options.ClaimWindow, as a TTL)", err)
	}
	return o, nil
}

// Engine takes and holds locks in one Redis. It is safe for concurrent use.
// An Engine owns two background goroutines, the watchdog that renews held
// leases and the receiver of release notifications on one subscription
// connection; Close stops both.
type Engine struct {
	rdb redis.UniversalClient
	opt Options

	id      string // random; names this Engine's notification channel
	channel string
	seq     atomic.Uint64 // attempt ids

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	closed atomic.Bool
	once   sync.Once

	run          runner // sends the scripts
	logMisconfig sync.Once
	downSince    atomic.Int64 // when Redis stopped answering, unix ns; 0 while it answers
	upSince      atomic.Int64 // when it last answered again after that, unix ns
	stats        holdStats
	wd           watchdog
	nf           notifier
	batch        batcher // acquire and release calls
	bg           tracker // flights, withdrawals and renewals, each bounded by the client's own timeouts

	// Script arguments boxed once: the default TTL, the fence retention
	// and the claim window in ms, and whether PUBLISH counts every
	// subscriber ("1": one server) or may not ("0": a Cluster, whose
	// SPUBLISH counts the subscribers of one node, while those on its
	// replicas, or on a master just demoted, hear it too; Sentinel, whose
	// subscription may be on the old master for a while after a switch).
	ttlBoxed, retArg, claimArg, trustArg any

	// refuse, when set, is why Acquire refuses to take locks: the server
	// evicts keys (see settings), as read by Check, when the first Acquire
	// begins and by watchSettings after it (see settle).
	refuse    atomic.Pointer[error]
	watching  sync.Once     // settle
	firstRead chan struct{} // closed when settle's first read landed
	settled   atomic.Bool   // it has

	// cluster: the client is a Cluster's, whose restart guard is kept per
	// slot (see lua/guardslots.lua). maxArg is Options.MaxTTL in ms, boxed
	// once for the scripts: the length of the guard. guardEnd is when the
	// last guard this Engine logged ends, unix ns (see noteGuard).
	cluster  bool
	maxArg   any
	guardEnd atomic.Int64

	// noRetries: the client sends each call once (MaxRetries < 0), so a
	// call that failed to dial never reached Redis.
	noRetries bool

	// The batcher's hooks, made once.
	lateAcquire, afterRelease func(*call)

	sw switches // a failover client's master switches (see switch.go)

	gates     gates  // the closed gates (lockcore.Gatekeeper)
	gatesChan string // their channel (see gatesChannel)

	rec instanceRecord // the Engine's record in Redis (see origin.go)
}

// New returns an Engine on rdb. The Engine does not own rdb: Close leaves it
// open. It returns an error when opt is invalid, or when rdb is a
// *redis.Ring: a Ring spreads keys over independent servers and moves them
// when one is down, so two owners could hold one lock.
//
// rdb's options need no change: the engine keeps its own deadlines, and
// every call is safe to run twice (go-redis re-sends a command whose reply
// was lost). A *redis.ClusterClient works: a lock's keys share one slot.
func New(rdb redis.UniversalClient, opt Options) (*Engine, error) {
	switch rdb.(type) {
	case nil:
		return nil, fmt.Errorf("routelock: redisengine.New: nil redis client")
	case *redis.Ring:
		return nil, fmt.Errorf("routelock: redisengine.New: a *redis.Ring cannot hold locks: it moves keys between independent servers when one is down, so two owners could hold one lock; use a *redis.Client or a *redis.ClusterClient")
	}
	opt, err := opt.withDefaults(isFailover(rdb))
	if err != nil {
		return nil, err
	}
	if opt.Logger != nil {
		opt.Logger = opt.Logger.With("instance", opt.Name)
	}

	var b [8]byte
	_, _ = rand.Read(b[:])
	l := &Engine{rdb: rdb, opt: opt, id: hex.EncodeToString(b[:])}
	l.channel = opt.Prefix + "notify:" + l.id
	l.gatesChan = opt.Prefix + "gates"
	if c, ok := rdb.(*redis.Client); ok && c.Options().DB != 0 {
		l.gatesChan += ":db" + strconv.Itoa(c.Options().DB)
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	ps, err := subscribe(l.ctx, rdb)
	if err != nil {
		l.cancel()
		return nil, err
	}
	l.run.rdb = rdb
	l.run.ack, l.run.ackMS = opt.Replicas, max(ms(opt.ReplicaTimeout), 1)
	if c, ok := rdb.(*redis.ClusterClient); ok && opt.Replicas > 0 {
		l.run.node = c.MasterForKey
	}
	l.maxArg = ms(opt.MaxTTL)
	_, l.cluster = rdb.(*redis.ClusterClient)
	l.run.cluster = l.cluster
	if !opt.OperatorOnly {
		l.run.noScript = l.guard
	}
	l.batch.run, l.batch.bg, l.batch.direct = &l.run, &l.bg, honoursDeadlines(rdb)
	l.batch.idle, l.batch.quit = make(chan []*call), l.ctx.Done()
	l.ttlBoxed, l.retArg, l.claimArg = ms(opt.TTL), ms(opt.FenceRetention), ms(l.claimPX())
	l.trustArg = "0"
	if c, ok := rdb.(*redis.Client); ok {
		// A failover client (Sentinel) may subscribe on another server
		// than the one it sends commands to, for a while after a master
		// switch: PUBLISH then counts no subscriber of a live waiter.
		if c.Options().Addr != failoverAddr {
			l.trustArg = "1"
		}
		l.nf.probe = true
		l.noRetries = c.Options().MaxRetries < 0
	}
	l.lateAcquire, l.afterRelease = l.withdrawLate, l.released
	l.watchSwitches(rdb)
	l.wd.start(l)
	l.nf.start(l, ps)
	l.bg.add()
	go l.watchGates()
	return l, nil
}

// failoverAddr is the Addr of the options of a client made by
// redis.NewFailoverClient.
const failoverAddr = "FailoverClient"

// isFailover reports whether rdb is a failover client (Sentinel).
func isFailover(rdb redis.UniversalClient) bool {
	c, ok := rdb.(*redis.Client)
	return ok && c.Options().Addr == failoverAddr
}

// subscribe returns a subscription with no channels yet. A client of a type
// this package does not know may panic here (a Ring does); that is an error
// of New, not a crash in the background.
func subscribe(ctx context.Context, rdb redis.UniversalClient) (ps *redis.PubSub, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("routelock: redisengine.New: %T cannot subscribe to notifications: %v", rdb, r)
		}
	}()
	return rdb.Subscribe(ctx), nil
}

// honoursDeadlines reports whether rdb stops a call's I/O at its context's
// deadline.
func honoursDeadlines(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// claimPX is how long a waiter in another process is granted the lock
// before it claims it.
func (l *Engine) claimPX() time.Duration { return l.opt.ClaimWindow * 3 / 5 }

// recheck is how long a waiter sleeps at most before asking Redis again.
func (l *Engine) recheck() time.Duration { return l.opt.ClaimWindow * 3 / 10 }

// Close stops the watchdog and the notification receiver. Leases still held
// are no longer renewed: their contexts are cancelled with ErrLockLost (and
// ErrClosed), and their keys expire in Redis at the end of their TTL unless
// released. Waiting acquisitions fail with ErrClosed. Close waits up to
// ReleaseTimeout for the calls, withdrawals and renewals still on the wire;
// those the client has not answered by then end with the client's own
// timeouts. Close is idempotent.
func (l *Engine) Close() error {
	l.once.Do(func() {
		l.closed.Store(true)
		l.cancel()
		l.nf.stop()
		l.wd.stop()
		l.bg.wait(time.Now().Add(l.opt.ReleaseTimeout))
	})
	return nil
}

// redisKeys returns the lock's hold, queue, fence, revoked-entries, audit,
// shared-entries and shared-fields keys. They share the hash tag {key},
// and one allocation.
func (l *Engine) redisKeys(k lockcore.Key) [7]string { return l.keysOf(k.String()) }

// keysOf returns the Redis keys of the lock on key, an escaped key
// (lockcore.Key.String); see redisKeys.
func (l *Engine) keysOf(key string) (ks [7]string) {
	var b strings.Builder
	n := len(l.opt.Prefix) + len(key) + 2
	b.Grow(6*n + 12)
	b.WriteString(l.opt.Prefix)
	b.WriteByte('{')
	b.WriteString(key)
	b.WriteString("}:q")
	for _, suffix := range []string{"}:f", "}:r", "}:a", "}:s", "}:p"} {
		b.WriteString(l.opt.Prefix)
		b.WriteByte('{')
		b.WriteString(key)
		b.WriteString(suffix)
	}
	s := b.String()
	m := n + 2 // the length of each of the suffixed keys
	return [7]string{s[:n], s[:m], s[m : 2*m], s[2*m : 3*m], s[3*m : 4*m], s[4*m : 5*m], s[5*m:]}
}

// ttlArg returns ms(ttl) as a script argument.
func (l *Engine) ttlArg(ttl time.Duration) any {
	if ttl == l.opt.TTL {
		return l.ttlBoxed
	}
	return ms(ttl)
}

// detached is a context with the values of its parent and a deadline,
// which ends at the deadline but is never cancelled: a call runs until it
// is answered or its deadline passes, even when the request that asked for
// it is gone. It must end there, and not merely carry the deadline: go-redis
// stops its retries' back-off, its waits for a connection and for a dial
// only when the context is done, whatever ContextTimeoutEnabled says, so a
// client redialling a Redis that refuses connections would otherwise go on
// for seconds (MaxRetries redials of DialerRetries attempts each). done is
// closed when the deadline passes (see call.arm), and never otherwise.
type detached struct {
	context.Context
	deadline time.Time
	done     chan struct{}
}

func (d detached) Deadline() (time.Time, bool) { return d.deadline, true }
func (d detached) Done() <-chan struct{}       { return d.done }

func (d detached) Err() error {
	select {
	case <-d.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// nextID returns a fresh attempt id, unique across Lockers, for an attempt
// that begins at now: "<engine id>.<seq>.<start>", the start in µs since
// the epoch, base 36 (see lua/hold.lua). It always contains a '.', which
// the scripts rely on to tell it from other fields.
func (l *Engine) nextID(now time.Time) string {
	var b [64]byte
	s := append(b[:0], l.id...)
	s = append(s, '.')
	s = strconv.AppendUint(s, l.seq.Add(1), 36)
	s = append(s, '.')
	s = strconv.AppendInt(s, now.UnixMicro(), 36)
	return string(s)
}

func ms(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// minTTL is the shortest lease a route may ask for (lock.TTL), and so the
// shortest of the engine's durations.
const minTTL = 30 * time.Millisecond

// checkTTL refuses a lease length below minTTL, as a route's is refused.
func checkTTL(d time.Duration) error {
	if d < 0 || d > 0 && d < minTTL {
		return fmt.Errorf("%w: TTL %v is below the minimum %v", lockcore.ErrMisconfigured, d, minTTL)
	}
	return nil
}
