package quorumengine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/lockcore"
)

// Options configure the engine New returns. The zero Options are the
// defaults.
type Options struct {
	// Prefix is put before every key the engine writes on the masters.
	// Engines that share a lock must share a Prefix and the masters, in
	// any order. Default: "routelock:".
	Prefix string

	// TTL is the default lease of a hold. Default: 10 seconds.
	TTL time.Duration

	// MaxTTL bounds every hold's TTL (a longer one fails with
	// lockcore.ErrMisconfigured), and is how long a master that restarted
	// without its data refuses fresh holds (the restart guard). Every
	// engine on the masters must share it. Default: 1 minute, or TTL when
	// that is longer.
	MaxTTL time.Duration

	// Timeout bounds how long the engine waits for the masters' answers,
	// whatever the clients' own timeouts: to an attempt to acquire (never
	// more than a third of its TTL), a release, an operator's call. A
	// renewal waits for a quorum until the hold's validity ends.
	// Default: 500ms.
	Timeout time.Duration

	// Drift is the clock drift allowed between the engine and the
	// masters, as a fraction of the TTL: a hold counts as valid for its
	// TTL less Drift times the TTL, less 2ms, less a tenth of the TTL as
	// the margin in which its loss is told, from when the call that
	// confirmed it was sent. Default: 0.01.
	Drift float64

	// Name is the engine's instance name, which operators see beside its
	// holds. Default: "<hostname>-<pid>".
	Name string

	// Events, if set, is told what the engine does (lockcore.Events):
	// waits, wake-ups and the renewals of its holds.
	Events lockcore.Events
}

// engine takes locks on a majority of independent Redis masters. It is
// safe for concurrent use.
type engine struct {
	masters  []redis.UniversalClient
	quorum   int
	opt      Options
	instance string
	ctx      context.Context // ends with Close
	cancel   context.CancelFunc
	closed   atomic.Bool
	busy     tracker // every call in flight, and every renewer
	defect   string  // the tests' planted defect; "" in use

	mu    sync.Mutex
	holds map[*hold]struct{}
	lines map[string]*waitLine // by key
}

// New returns an engine on masters, each an independent Redis master (a
// single server, not a Cluster, with no replication between them); an
// odd number of them, 3 or 5. It does not own them: its Close leaves them
// open. The engine is a lockcore.Engine, for lock.FromEngine, and a
// lockcore.Operator, for package admin and the routelock command; its
// Close ends every hold it has (their Done closes, with an error
// matching lockcore.ErrClosed) and releases them on the masters, and its
// waiters fail with lockcore.ErrClosed.
func New(masters []redis.UniversalClient, o Options) (lockcore.Engine, error) {
	if len(masters) == 0 {
		return nil, fmt.Errorf("%w: quorumengine.New: no masters", lockcore.ErrMisconfigured)
	}
	for i, m := range masters {
		if m == nil {
			return nil, fmt.Errorf("%w: quorumengine.New: master %d is nil", lockcore.ErrMisconfigured, i)
		}
	}
	if o.Prefix == "" {
		o.Prefix = "routelock:"
	}
	if o.TTL == 0 {
		o.TTL = 10 * time.Second
	}
	if o.MaxTTL == 0 {
		o.MaxTTL = max(time.Minute, o.TTL)
	}
	if o.Timeout == 0 {
		o.Timeout = 500 * time.Millisecond
	}
	if o.Drift == 0 {
		o.Drift = 0.01
	}
	if o.Name == "" {
		host, _ := os.Hostname()
		o.Name = host + "-" + strconv.Itoa(os.Getpid())
	}
	if o.TTL < 0 || o.Timeout < 0 || o.MaxTTL < o.TTL || o.Drift < 0 || o.Drift >= 0.5 {
		return nil, fmt.Errorf("%w: quorumengine.Options: TTL %v, MaxTTL %v, Timeout %v, Drift %v",
			lockcore.ErrMisconfigured, o.TTL, o.MaxTTL, o.Timeout, o.Drift)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &engine{
		masters: masters, quorum: len(masters)/2 + 1, opt: o, instance: newInstance(),
		ctx: ctx, cancel: cancel, holds: map[*hold]struct{}{}, lines: map[string]*waitLine{},
	}, nil
}

// Promises implements lockcore.Engine: ordered fencing tokens and
// re-entry by owner token. Waiters poll: no FIFO.
func (e *engine) Promises() lockcore.Promises {
	return lockcore.Promises{OrderedFences: true, TokenReentry: true}
}

// Close implements lockcore.Engine (see New). It is idempotent.
func (e *engine) Close() error {
	e.mu.Lock()
	if !e.closed.CompareAndSwap(false, true) {
		e.mu.Unlock()
		return nil
	}
	hs := make([]*hold, 0, len(e.holds))
	for h := range e.holds {
		hs = append(hs, h)
	}
	e.mu.Unlock()
	for _, h := range hs {
		h.end(errClosed)
	}
	errs := make([]error, len(hs))
	var giving sync.WaitGroup
	for i, h := range hs {
		giving.Add(1)
		go func() {
			defer giving.Done()
			errs[i] = h.giveUp(context.Background())
		}()
	}
	giving.Wait()
	e.cancel()
	// The calls still in flight end now, unless a client does not bound
	// its reads by their contexts: Close waits for them a while.
	e.busy.wait(8 * e.opt.Timeout)
	return errors.Join(errs...)
}

// errClosed ends the holds of a closed engine.
var errClosed error = &both{"routelock: lease lost: the engine was closed", [2]error{lockcore.ErrLockLost, lockcore.ErrClosed}}

// The keys of a lock on a master. key is a lockcore.Key's string, which
// never holds '{' or '}': the braces make it the hash tag.
func (e *engine) lockKey(key string) string  { return e.opt.Prefix + "{" + key + "}:l" }
func (e *engine) countKey(key string) string { return e.opt.Prefix + "{" + key + "}:f" }
func (e *engine) auditKey(key string) string { return e.opt.Prefix + "{" + key + "}:a" }
func (e *engine) goneKey(key, attempt string) string {
	return e.opt.Prefix + "{" + key + "}:w:" + attempt
}
func (e *engine) markKey(key string, fence int64) string {
	return e.opt.Prefix + "{" + key + "}:v:" + strconv.FormatInt(fence, 10)
}

// The restart guard of a master and the run it was decided for: the
// server's, whatever the prefix.
const (
	guardKey    = "routelock:quorum:restart-guard"
	guardRunKey = "routelock:quorum:restart-guard:run"
)

// reply is one master's answer to a call.
type reply struct {
	i   int
	v   any
	err error
}

// ended returns ctx's error, or context.DeadlineExceeded once its deadline
// has passed by the clock: a call bounded by the deadline gives up on its
// own timer, which may fire a moment before ctx is done.
func ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// errNoAnswer is the error of a master that did not answer in time.
var errNoAnswer = errors.New("no answer in time")

// call runs script on every master at once, each call in a goroutine of
// its own bounded by deadline, and collects the replies until enough says
// it has enough (or every master answered, or deadline passed); the calls
// still in flight then go on in the background, until deadline. Each
// master's args come from args(i). A master not heard from has
// errNoAnswer.
func (e *engine) call(deadline time.Time, script *redis.Script, keys []string, args func(i int) []any, enough func([]reply) bool) []reply {
	return e.callFor(nil, deadline, deadline, script, keys, args, enough)
}

// callFor is call, with every call in flight counted in inflight (when
// not nil) until it ends, and the replies collected only until wait (no
// later than deadline), when the calls may go on in the background until
// deadline.
func (e *engine) callFor(inflight *sync.WaitGroup, wait, deadline time.Time, script *redis.Script, keys []string, args func(i int) []any, enough func([]reply) bool) []reply {
	n := len(e.masters)
	ch := make(chan reply, n)
	ctx, cancel := context.WithDeadline(e.ctx, deadline) // Close ends what is left
	var left sync.WaitGroup
	for i, m := range e.masters {
		left.Add(1)
		e.busy.add()
		if inflight != nil {
			inflight.Add(1)
		}
		go func() {
			defer e.busy.done()
			defer left.Done()
			if inflight != nil {
				defer inflight.Done()
			}
			v, err := e.run(ctx, m, script, keys, args(i))
			ch <- reply{i, v, err}
		}()
	}
	go func() { left.Wait(); cancel() }()
	out := make([]reply, n)
	for i := range out {
		out[i] = reply{i: i, err: errNoAnswer}
	}
	timer := time.NewTimer(time.Until(wait))
	defer timer.Stop()
	got := make([]reply, 0, n)
	for len(got) < n {
		select {
		case r := <-ch:
			out[r.i] = r
			got = append(got, r)
			if enough != nil && enough(got) {
				return out
			}
		case <-timer.C:
			return out
		}
	}
	return out
}

// run runs script on master m; a master that answers NOSCRIPT has lost
// its script cache, and perhaps its data: its restart guard is decided
// first (see guardScript).
func (e *engine) run(ctx context.Context, m redis.UniversalClient, script *redis.Script, keys []string, args []any) (any, error) {
	v, err := script.EvalSha(ctx, m, keys, args...).Result()
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		if _, err := guardScript.Eval(ctx, m, []string{guardKey, guardRunKey}, e.opt.MaxTTL.Milliseconds()).Result(); err != nil {
			return nil, err
		}
		v, err = script.Eval(ctx, m, keys, args...).Result()
	}
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	return v, err
}

// Take implements lockcore.Engine.
func (e *engine) Take(ctx context.Context, r lockcore.Request) (lockcore.Hold, error) {
	if e.closed.Load() {
		return nil, lockcore.ErrClosed
	}
	if r.Share != 0 {
		return nil, fmt.Errorf("%w: Share %d: quorumengine holds exclusive locks only", lockcore.ErrMisconfigured, r.Share)
	}
	ttl := r.TTL
	if ttl == 0 {
		ttl = e.opt.TTL
	}
	if ttl > e.opt.MaxTTL {
		return nil, fmt.Errorf("%w: TTL %v is longer than quorumengine.Options.MaxTTL %v, which the restart guard protects", lockcore.ErrMisconfigured, ttl, e.opt.MaxTTL)
	}
	key := r.Key.String()
	var waitUntil time.Time
	if r.Wait > 0 {
		waitUntil = time.Now().Add(r.Wait)
	}
	waiting := false
	defer func() {
		if waiting && e.opt.Events != nil {
			e.opt.Events.Waiting(r.Key, -1)
		}
	}()
	backoff := 5 * time.Millisecond
	var last *transient // the last attempt's, when it failed so
	for n := 1; ; n++ {
		h, retry, err := e.attempt(ctx, r, ttl, r.Token+"."+strconv.Itoa(n))
		if h != nil && ctx.Err() != nil {
			// The caller left while the attempt flew: it holds nothing.
			_ = h.Release(ctx, nil)
			return nil, errors.Join(&lockcore.ContentionError{Key: key, RetryAfter: retry, TimedOut: r.Wait >= 0}, ctx.Err())
		}
		if _, ok := err.(*transient); ok && waiting && last == nil {
			if cause := ended(ctx); cause != nil {
				// The caller's deadline, not the masters, cut this poll
				// short: another owner held the key when they last
				// answered. Had they failed then too, their failure
				// stands (below).
				return nil, errors.Join(&lockcore.ContentionError{Key: key, RetryAfter: retry, TimedOut: true}, cause)
			}
		}
		last = nil
		if t, ok := err.(*transient); ok {
			err = t.err
			// A wait shorter than the restart guards' refusal fails at
			// once; a longer one waits it out, as any transient failure.
			var guard *lockcore.RestartGuardError
			if r.Wait >= 0 && (!errors.As(err, &guard) || guard.RetryAfter < time.Until(waitUntil)) {
				last, err = t, nil
			}
		}
		if h != nil || err != nil {
			return h, err
		}
		if r.Wait < 0 {
			return nil, &lockcore.ContentionError{Key: key, RetryAfter: retry}
		}
		if !waiting {
			waiting = true
			if e.opt.Events != nil {
				e.opt.Events.Waiting(r.Key, 1)
			}
			// The waiters of a key in one process line up: only the
			// first polls the masters, so that a crowd of them neither
			// loads the masters nor splits their votes.
			leave, err := e.line(ctx, key, waitUntil)
			if err != nil {
				if e.opt.Events != nil && errors.Is(err, lockcore.ErrWaitTimeout) {
					e.opt.Events.Woken(r.Key, "timer")
				}
				return nil, err
			}
			defer leave()
			backoff = 5 * time.Millisecond
			continue
		}
		// Polling with jitter: a random pause up to backoff, which
		// doubles up to a tenth of the TTL, never past the wait.
		backoff = min(2*backoff, max(ttl/10, 10*time.Millisecond))
		pause := backoff/2 + rand.N(backoff/2+1)
		left := time.Until(waitUntil)
		timer := time.NewTimer(min(pause, max(left, 0)))
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			if last != nil { // the masters, not another owner, kept it
				return nil, errors.Join(last.err, ctx.Err())
			}
			return nil, errors.Join(&lockcore.ContentionError{Key: key, RetryAfter: retry, TimedOut: true}, ctx.Err())
		case <-e.ctx.Done():
			timer.Stop()
			return nil, lockcore.ErrClosed
		}
		if e.opt.Events != nil {
			e.opt.Events.Woken(r.Key, "timer")
		}
		if !time.Now().Before(waitUntil) {
			if last != nil {
				return nil, last.err
			}
			return nil, &lockcore.ContentionError{Key: key, RetryAfter: retry, TimedOut: true}
		}
	}
}

// line waits, until waitUntil, ctx's end or Close, to be the first of the
// waiters in line for key in this engine, and returns the function that
// leaves the line.
func (e *engine) line(ctx context.Context, key string, waitUntil time.Time) (func(), error) {
	e.mu.Lock()
	l := e.lines[key]
	if l == nil {
		l = &waitLine{first: make(chan struct{}, 1)}
		e.lines[key] = l
	}
	l.n++
	e.mu.Unlock()
	leave := func() {
		e.mu.Lock()
		if l.n--; l.n == 0 {
			delete(e.lines, key)
		}
		e.mu.Unlock()
	}
	timer := time.NewTimer(time.Until(waitUntil))
	defer timer.Stop()
	select {
	case l.first <- struct{}{}:
		return func() { <-l.first; leave() }, nil
	case <-timer.C:
		leave()
		return nil, &lockcore.ContentionError{Key: key, RetryAfter: 100 * time.Millisecond, TimedOut: true}
	case <-ctx.Done():
		leave()
		return nil, errors.Join(&lockcore.ContentionError{Key: key, RetryAfter: 100 * time.Millisecond, TimedOut: true}, ctx.Err())
	case <-e.ctx.Done():
		leave()
		return nil, lockcore.ErrClosed
	}
}

// waitLine is the line of the waiters of one key in an engine: first
// holds a value while one of them polls.
type waitLine struct {
	first chan struct{}
	n     int // waiters in line, the first included
}

// attempt makes one attempt to take r: on every master at once, then, with
// a quorum won, the hold confirmed with its fence on every master. It
// returns the hold; or nil and how long the holder's lease has left when
// the lock is held by another owner (or the votes split); or an error.
// An attempt that fails gives up what it took, on every master.
//
// Each attempt of an acquisition has an id of its own: a failed one marks
// it given up on every master, so that its calls that land late take
// nothing, and a hold's confirmations and renewals, and its release, go
// by the id of the attempt that won it.
func (e *engine) attempt(ctx context.Context, r lockcore.Request, ttl time.Duration, id string) (*hold, time.Duration, error) {
	key := r.Key.String()
	keys := []string{e.lockKey(key), e.countKey(key), guardKey, e.goneKey(key, id)}
	args := make([]any, 0, 6+len(r.Join))
	args = append(args, r.Token, ttl.Milliseconds(), e.instance, e.opt.Name, r.Route, r.Trace)
	for _, j := range r.Join {
		args = append(args, j)
	}
	sent := time.Now()
	deadline := sent.Add(min(e.opt.Timeout, ttl/3))
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	q, n := e.quorum, len(e.masters)
	// Enough: a quorum for one owner, or none possible any more.
	replies := e.call(deadline, acquireScript, keys, func(int) []any { return args }, func(got []reply) bool {
		votes, against := map[string]int{}, 0
		for _, g := range got {
			if tok, _, ok := granted(g); ok {
				votes[tok]++
				if votes[tok] >= q {
					return true
				}
			} else {
				against++
			}
		}
		return n-against < q
	})
	votes := map[string]int{}
	var fences = map[string][]int64{}
	var answered, guarded, busy int
	var retry, guardLeft time.Duration = 100 * time.Millisecond, 0
	var firstErr error
	late := 0 // masters that did not answer in time, rather than failed
	for _, g := range replies {
		if g.err != nil {
			if firstErr == nil {
				firstErr = g.err
			}
			if g.err == errNoAnswer || errors.Is(g.err, context.DeadlineExceeded) || isTimeout(g.err) {
				late++
			}
			continue
		}
		answered++
		if tok, fence, ok := granted(g); ok {
			if tok == "" {
				tok = r.Token
			}
			votes[tok]++
			if tok == r.Token || confirmedFence(g) {
				fences[tok] = append(fences[tok], fence)
			}
			continue
		}
		code, ms := replyInts(g.v)
		switch code {
		case 0:
			busy++
			retry = min(retry, max(time.Duration(ms)*time.Millisecond, time.Millisecond))
		case -1:
			guarded++
			guardLeft = max(guardLeft, time.Duration(ms)*time.Millisecond)
		}
	}
	owner := ""
	for tok, v := range votes {
		if v >= q {
			owner = tok
		}
	}
	if owner != "" {
		// A fresh hold's fence is the greatest of its quorum's; a
		// re-entry's is its holder's, as the holder's quorum confirmed it,
		// which at least one master of any quorum says.
		if fence := maxOf(fences[owner]); fence > 0 {
			if h := e.confirm(r, ttl, owner, fence, sent, id); h != nil {
				return h, 0, nil
			}
		}
	}
	// No quorum: give up what was taken, on every master, those that
	// did not answer too (their grant may land later).
	e.withdraw(key, r.Token, id, ttl)
	switch {
	case e.closed.Load():
		return nil, 0, lockcore.ErrClosed
	case answered < q:
		err := fmt.Errorf("%w: %d of %d masters answered, %d needed: %w", lockcore.ErrUnavailable, answered, n, q, firstErr)
		if ctx.Err() != nil {
			return nil, 0, errors.Join(err, ctx.Err())
		}
		if answered+late >= q {
			// Masters that answer late (loaded, or cut off) may answer
			// the next attempt; masters that refuse (down) will not.
			return nil, 0, &transient{err}
		}
		return nil, 0, err
	case busy > 0:
		return nil, retry, nil // another owner holds it, on some masters at least
	case n-guarded < q:
		// Restart guards, not another owner, keep the quorum.
		return nil, 0, &transient{&lockcore.RestartGuardError{RetryAfter: guardLeft}}
	}
	// A quorum answered, but refused by a guard, late or split among
	// attempts: it may pass in a moment.
	err := fmt.Errorf("%w: no quorum of %d masters for one owner (%d answered, %d refused by a restart guard)", lockcore.ErrUnavailable, q, answered, guarded)
	if guarded > 0 {
		err = errors.Join(&lockcore.RestartGuardError{RetryAfter: guardLeft}, err)
	}
	return nil, retry, &transient{err}
}

// transient is the error of an attempt that failed for a reason that may
// pass, not another owner's hold: a quorum refused by restart guards,
// late, or split among attempts. A waiting acquisition tries again, and
// fails with it when its wait runs out.
type transient struct{ err error }

func (t *transient) Error() string { return t.err.Error() }
func (t *transient) Unwrap() error { return t.err }

// confirm confirms on every master the hold of r won by a quorum for
// owner (r.Token, or the holder it re-enters) with fence: it is the hold
// once a quorum has it with that fence, and its counters are raised to
// it, within the lease's validity from sent. The masters that lagged take
// it in the background, until the validity ends; renewals take it where
// they still have not. It returns nil, nil when no quorum confirmed it.
func (e *engine) confirm(r lockcore.Request, ttl time.Duration, owner string, fence int64, sent time.Time, id string) *hold {
	h := &hold{e: e, key: r.Key, ttl: ttl, token: owner, mine: r.Token, attempt: id, fence: fence, route: r.Route, trace: r.Trace, done: make(chan struct{})}
	until := h.validity(sent)
	if e.defect == "noFenceRaise" {
		// The planted defect: the quorum's fence is raised nowhere.
		if !time.Now().Before(until) {
			return nil
		}
		return e.start(h, until)
	}
	ok := e.confirmed(h, until, nil)
	if !ok || !time.Now().Before(until) {
		return nil
	}
	return e.start(h, until)
}

// confirmed runs the claim script for h on every master, until deadline,
// and reports whether a quorum confirmed it; revoked, when not nil, is
// told the reason of a revocation found.
func (e *engine) confirmed(h *hold, deadline time.Time, revoked func(reason string)) bool {
	key := h.key.String()
	keys := []string{e.lockKey(key), e.countKey(key), e.markKey(key, h.fence), e.goneKey(key, h.attempt)}
	args := []any{h.token, h.mine, h.ttl.Milliseconds(), h.fence, e.instance, e.opt.Name, h.route, h.trace}
	q, n := e.quorum, len(e.masters)
	replies := e.callFor(&h.inflight, deadline, deadline, claimScript, keys, func(int) []any { return args }, func(got []reply) bool {
		yes, no := 0, 0
		for _, g := range got {
			if c, _ := replyInts(g.v); g.err == nil && c == 1 {
				yes++
			} else {
				no++
			}
		}
		return yes >= q || n-no < q
	})
	yes, no := 0, 0
	for _, g := range replies {
		if g.err != nil {
			continue
		}
		code, _ := replyInts(g.v)
		switch code {
		case 1:
			yes++
		case -2:
			if revoked != nil {
				revoked(replyString(g.v, 1))
			}
			return false
		default:
			no++
		}
	}
	if yes < q && n-no < q && revoked != nil {
		revoked("")
	}
	return yes >= q
}

// withdraw gives up the hold of token on key on every master, and marks
// the attempt id given up, in the background, each call bounded by ttl:
// no grant of the attempt outlives it anyway.
func (e *engine) withdraw(key, token, id string, ttl time.Duration) {
	if e.defect == "noRelease" {
		return // the planted defect: a failed quorum leaves its grants
	}
	keys := []string{e.lockKey(key), e.goneKey(key, id)}
	now := time.Now()
	e.callFor(nil, now, now.Add(max(ttl, 4*e.opt.Timeout)), releaseScript, keys, func(int) []any { return []any{token, ttl.Milliseconds()} }, nil)
}

// start registers h, valid until until, and starts its renewals; on a
// closed engine, it gives h up and returns nil.
func (e *engine) start(h *hold, until time.Time) *hold {
	h.stop = make(chan struct{})
	h.until = until
	h.expiry = time.AfterFunc(time.Until(until), func() { h.end(errExpired) })
	e.mu.Lock()
	if e.closed.Load() {
		e.mu.Unlock()
		h.end(errClosed)
		_ = h.giveUp(context.Background())
		return nil
	}
	e.holds[h] = struct{}{}
	e.busy.add()
	e.mu.Unlock()
	go h.renew()
	return h
}

// tracker counts work in flight, and waits for none to be left.
type tracker struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n falls to 0 while waited for
}

func (t *tracker) add() {
	t.mu.Lock()
	t.n++
	t.mu.Unlock()
}

func (t *tracker) done() {
	t.mu.Lock()
	if t.n--; t.n == 0 && t.idle != nil {
		close(t.idle)
		t.idle = nil
	}
	t.mu.Unlock()
}

// wait waits, at most for d, until no work is in flight.
func (t *tracker) wait(d time.Duration) {
	t.mu.Lock()
	if t.n == 0 {
		t.mu.Unlock()
		return
	}
	if t.idle == nil {
		t.idle = make(chan struct{})
	}
	idle := t.idle
	t.mu.Unlock()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-idle:
	case <-timer.C:
	}
}

// granted reads a reply to the acquire script: the holder's token ("" for
// the caller's own) and the fence, when it granted or re-entered.
func granted(g reply) (string, int64, bool) {
	if g.err != nil {
		return "", 0, false
	}
	a, _ := g.v.([]any)
	if len(a) < 2 {
		return "", 0, false
	}
	code, _ := a[0].(int64)
	fence, _ := a[1].(int64)
	switch code {
	case 1:
		return "", fence, true
	case 2:
		tok, _ := a[2].(string)
		return tok, fence, true
	}
	return "", 0, false
}

// isTimeout reports whether err is a network timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// confirmedFence reports whether a re-entry's reply to the acquire script
// carries the fence its holder's quorum confirmed.
func confirmedFence(g reply) bool {
	a, _ := g.v.([]any)
	return len(a) > 3 && a[3] == "1"
}

// replyInts reads the first two integers of a script's reply.
func replyInts(v any) (int64, int64) {
	a, _ := v.([]any)
	var x, y int64
	if len(a) > 0 {
		x, _ = a[0].(int64)
	}
	if len(a) > 1 {
		y, _ = a[1].(int64)
	}
	return x, y
}

// replyString reads the string at i of a script's reply.
func replyString(v any, i int) string {
	a, _ := v.([]any)
	if len(a) > i {
		s, _ := a[i].(string)
		return s
	}
	return ""
}

func maxOf(xs []int64) int64 {
	var m int64
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// majority returns the value most of xs have, the greatest on a tie.
func majority(xs []int64) int64 {
	count := map[int64]int{}
	best, bestN := int64(0), 0
	for _, x := range xs {
		count[x]++
		if c := count[x]; c > bestN || c == bestN && x > best {
			best, bestN = x, c
		}
	}
	return best
}
