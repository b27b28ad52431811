package redisengine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/lockcore"
)

// misconfigured reports whether err is Redis saying that the client is set
// up wrongly, which retrying does not mend: authentication (WRONGPASS,
// NOAUTH), permissions (NOPERM), a database index out of range.
func misconfigured(err error) bool {
	if errors.Is(err, lockcore.ErrMisconfigured) {
		return true
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	for _, p := range []string{"WRONGPASS", "NOAUTH", "NOPERM"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return strings.Contains(msg, "DB index is out of range") || strings.Contains(msg, "invalid DB index")
}

// minMajor is the oldest Redis the scripts run on: they use PEXPIRE's GT
// option (Redis 7.0).
const minMajor = 7

// Check verifies, in a few round trips, that the engine can work: Redis
// answers (connectivity), accepts the client's credentials and database,
// does not evict keys when full (maxmemory-policy noeviction, or no
// maxmemory: an evicting server could delete a held lock, and Acquire
// refuses to take locks there too), runs the engine's scripts, and is
// recent enough (7.0 or later), and the engine's notification
// subscription is up. Call it at startup. An error matches
// lockcore.ErrMisconfigured when the set-up is wrong (it will not mend
// itself) and lockcore.ErrUnavailable when Redis could not be reached;
// either way it says what failed.
//
// Its round trips together take at most Options.Timeout, or until ctx's
// deadline if that comes first, whatever the client's own timeouts and
// retries, as one call of an acquisition does; waiting for the
// subscription, which comes up on its own, may take up to 2 s +
// Options.Timeout more.
func (l *Engine) Check(ctx context.Context) error {
	if l.closed.Load() {
		return lockcore.ErrClosed
	}
	deadline := time.Now().Add(l.opt.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	// A client at go-redis's defaults does not stop a read at the deadline:
	// the round trips run in a goroutine of their own, which the client's
	// own timeouts end, and Check waits for them until the deadline.
	res := make(chan error, 1)
	l.bg.do(func() { res <- l.checkRedis(rctx) })
	select {
	case err := <-res:
		if err != nil {
			return err
		}
	case <-rctx.Done():
		return l.report(unavailable("check", fmt.Errorf("%w: %w", errNoAnswer, rctx.Err())))
	}
	// The subscription comes up on its own goroutine; wait for it a
	// bounded time even when ctx has no deadline.
	pctx, cancel := context.WithTimeout(ctx, healthInterval+l.opt.Timeout)
	defer cancel()
	if err := l.nf.ping(pctx); err != nil {
		return l.report(unavailable("check: notifications", err))
	}
	return nil
}

// checkRedis makes Check's round trips to Redis.
func (l *Engine) checkRedis(ctx context.Context) error {
	if err := l.rdb.Ping(ctx).Err(); err != nil {
		return l.report(unavailable("check: ping", err))
	}
	if v, ok := serverVersion(ctx, l.rdb); ok {
		if major, _ := strconv.Atoi(strings.SplitN(v, ".", 2)[0]); major < minMajor {
			return l.report(fmt.Errorf("%w: check: Redis %s is too old: the engine needs %d.0 or later", lockcore.ErrMisconfigured, v, minMajor))
		}
	}
	bad, err := l.settings(ctx)
	l.noteSettings(bad, err)
	if err != nil {
		return l.report(unavailable("check: settings", err))
	}
	if bad != nil {
		return l.report(bad) // ErrMisconfigured, and why
	}
	if l.run.noScript != nil {
		// Loading the scripts would hide a restart from the other Engines.
		if err := l.run.noScript(ctx, ""); err != nil {
			return l.report(unavailable("check: restart guard", err))
		}
	}
	for _, s := range []*script{acquireScript, sharedScript, releaseScript, renewScript, sharedRenewScript, revokeScript} {
		if err := l.run.load(ctx, s); err != nil {
			return l.report(unavailable("check: scripts", err))
		}
	}
	return nil
}

// serverVersion returns the server's redis_version; false when the server
// does not say (miniredis).
func serverVersion(ctx context.Context, rdb redis.UniversalClient) (string, bool) {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return "", false
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, true
		}
	}
	return "", false
}

// report logs err once per kind (misconfiguration, unavailability) through
// the engine's logger, if any, and returns it.
func (l *Engine) report(err error) error {
	var short *replicaError
	if errors.As(err, &short) {
		return err // Redis answered: too few replicas is no outage
	}
	if c, ok := l.rdb.(*redis.ClusterClient); ok && errors.Is(err, lockcore.ErrUnavailable) {
		// A node that stopped answering may have been failed over: go-redis
		// reloads the slots' owners on a MOVED, which a dead node never
		// sends, or once a minute. LazyReload returns at once and
		// coalesces.
		c.ReloadState(l.ctx)
	}
	if lg := l.opt.Logger; lg != nil {
		switch {
		case errors.Is(err, lockcore.ErrMisconfigured):
			l.logMisconfig.Do(func() { lg.Error("routelock: Redis set up wrongly", "err", err) })
		case errors.Is(err, lockcore.ErrUnavailable):
			l.wentDown(err)
		}
	}
	return err
}

// wentDown notes that a call found Redis unreachable; the first such call
// after Redis answered is logged, not every one, however many fail at
// once.
func (l *Engine) wentDown(err error) {
	now := time.Now().UnixNano()
	if l.downSince.CompareAndSwap(0, now) {
		l.opt.Logger.Warn("routelock: Redis unreachable: locked requests are refused (503) until it answers", "err", err)
	}
}

// answered notes that Redis answered a call: the first answer after it was
// unreachable is logged, with how long that lasted.
func (l *Engine) answered() {
	if since := l.downSince.Load(); since != 0 {
		// upSince first: a failure of a call sent before now, reported
		// between the two, is one of this outage's, not a new one.
		now := time.Now().UnixNano()
		l.upSince.Store(now)
		if l.downSince.CompareAndSwap(since, 0) && l.opt.Logger != nil {
			l.opt.Logger.Info("routelock: Redis answers again", "down", time.Duration(now-since).Round(time.Millisecond))
		}
	}
}

// notServing reports whether err is Redis saying that it serves no command
// for now: loading its data after a start, busy with a script, a replica
// cut off from its master, a Cluster that is down.
func notServing(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	for _, p := range []string{"LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN"} {
		if strings.HasPrefix(rerr.Error(), p) {
			return true
		}
	}
	return false
}

// saw notes the outcome of a call of the Engine's own, sent at sent, that
// no caller is told of (a renewal, the notification subscription, the
// periodic read of the gates): an answer (err nil), or err. A failure to
// reach Redis, or to hear from it in time, an answer that it serves no
// command for now (notServing), or one that says the client is set up
// wrongly, is reported as a caller's would be, so that the log hears of an
// outage the moment the Engine first meets it, with or without lock
// traffic. A call sent before Redis last answered again failed in the
// outage that ended then: it is not a new one. Neither is a call that
// Close ended.
func (l *Engine) saw(op string, sent time.Time, err error) {
	switch {
	case err == nil:
		l.answered()
	case l.closed.Load() || errors.Is(err, context.Canceled):
	case !misconfigured(err) && !unreachable(err) && !notServing(err) &&
		!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, errNoAnswer):
		// Redis answered, with an error of the call's own.
	case sent.UnixNano() < l.upSince.Load():
	default:
		_ = l.report(unavailable(op, err))
	}
}
