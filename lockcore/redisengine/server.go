package redisengine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/lockcore"
)

// settingsEvery is how often an Engine reads its server's settings again,
// so that one changed while it runs (CONFIG SET) is refused too.
const settingsEvery = 30 * time.Second

// evicting returns an error matching lockcore.ErrMisconfigured when info,
// the text of INFO memory, says that Redis may evict keys to make room: a
// maxmemory-policy other than noeviction, with a maxmemory set. Such a
// server deletes a held lock under memory pressure and lets a second owner
// in while the first still runs (the holder would learn only at its next
// renewal). nil when it does not, or does not say (miniredis).
func evicting(info string) error {
	var policy, max string
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "maxmemory_policy:"); ok {
			policy = v
		} else if v, ok := strings.CutPrefix(line, "maxmemory:"); ok {
			max = v
		}
	}
	if policy == "" || policy == "noeviction" || max == "" || max == "0" {
		return nil
	}
	return fmt.Errorf("%w: Redis evicts keys when full (maxmemory-policy %s, maxmemory %s bytes) and could delete a held lock, letting a second owner in: give the locks a Redis whose maxmemory-policy is noeviction",
		lockcore.ErrMisconfigured, policy, max)
}

// settings reads the memory settings of the server, or of every master of
// a Cluster, and returns what evicting makes of the first that evicts
// (bad), or the error of a read that failed (err).
func (l *Engine) settings(ctx context.Context) (bad, err error) {
	read := func(ctx context.Context, c redis.Cmdable) error {
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			if misconfigured(err) || unreachable(err) {
				return err
			}
			return nil // a server that does not say (miniredis has no such section)
		}
		if e := evicting(info); e != nil && bad == nil {
			bad = e
		}
		return nil
	}
	if c, ok := l.rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex // ForEachMaster calls read concurrently
		err = c.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return read(ctx, c)
		})
	} else {
		err = read(ctx, l.rdb)
	}
	return bad, err
}

// noteSettings keeps what settings found: Acquire refuses while the server
// evicts. A server that does not answer changes nothing.
func (l *Engine) noteSettings(bad, err error) {
	switch {
	case bad != nil:
		l.refuse.Store(&bad)
	case err == nil:
		l.refuse.Store(nil)
	}
}

// settle starts, once, the first read of the closed gates and of the
// server's settings: the gates, which the Engine's first acquisitions wait
// for before they are decided (see knowGates), first; then the settings,
// which its first locks wait for after they are taken (see firstLock). It
// then has the settings read again every settingsEvery (watchSettings).
// Both are tracked in l.bg, which Close waits for. It returns a channel
// closed when the first read has landed. An Engine that never locks never
// reads them.
//
// The first read is waited for until Options.Timeout after it was sent, by
// every lock taken meanwhile and by none after, even when it has not landed
// by then (a client that ignores deadlines may take seconds): it is the
// watcher's to find an evicting server then, and each acquisition's to
// read the gates while they are not known.
func (l *Engine) settle(ctx context.Context) <-chan struct{} {
	l.watching.Do(func() {
		read := make(chan struct{})
		var once sync.Once
		done := func() {
			once.Do(func() {
				l.settled.Store(true)
				close(read)
			})
		}
		l.firstRead = read
		gatesRead := make(chan struct{})
		l.gates.first = gatesRead
		l.gates.started.Store(true)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.opt.Timeout)
		stop := time.AfterFunc(l.opt.Timeout, done)
		l.bg.do(func() {
			defer cancel()
			_ = l.loadGates(rctx)
			close(gatesRead)
			l.noteSettings(l.settings(rctx))
			stop.Stop()
			done()
		})
		l.bg.add()
		go l.watchSettings()
		l.startRecords()
	})
	return l.firstRead
}

// firstLock is the end of an acquisition that began before the server's
// settings were known: it waits for their first read (sent when the
// Engine's first acquisition began, so normally landed already; see settle
// for its bound), and gives h back if the server evicts, so that not even
// the Engine's first locks are held on such a server. The wait adds nothing
// to an acquisition that fails: it returns first.
func (l *Engine) firstLock(h *hold, read <-chan struct{}) error {
	<-read // bounded by settle
	if bad := l.refuse.Load(); bad != nil {
		// Given back, its lease never made: lost with a cause that is no
		// loss, of which the log says nothing.
		h.lose(*bad)
		_ = h.Release(context.Background(), *bad)
		return l.report(*bad)
	}
	return nil
}

// watchSettings reads the server's settings every settingsEvery until the
// Engine closes.
func (l *Engine) watchSettings() {
	l.every(settingsEvery, func() {
		ctx, cancel := context.WithTimeout(l.ctx, l.opt.Timeout)
		l.noteSettings(l.settings(ctx))
		cancel()
	})
}

// every runs f every d, each run d after the last one ended, until the
// Engine closes; it is a goroutine of l.bg, which it leaves when done.
func (l *Engine) every(d time.Duration, f func()) {
	defer l.bg.done()
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		f()
		t.Reset(d)
	}
}

// The restart guard's keys: the server's, whatever an Engine's Prefix (see
// lua/guard.lua). On a Cluster, each slot has a guard of its own,
// guardKey + ":{<a tag in the slot>}" (see slotGuardKey), and no run key.
var (
	guardKey    = "routelock:restart-guard"
	guardRunKey = "routelock:restart-guard:run"
)

// slotGuards holds the restart guard's key of each Cluster slot, made on
// first use.
var slotGuards [slots]atomic.Pointer[string]

// slotGuardKey returns the restart guard's key of Cluster slot s.
func slotGuardKey(s int) *string {
	if k := slotGuards[s].Load(); k != nil {
		return k
	}
	k := guardKey + ":{" + slotTag(s) + "}"
	slotGuards[s].Store(&k) // a racing store stores the same name
	return &k
}

// slotTagList is every slot's tag (slotTag), by slot, space-separated: the
// names of the guards that lua/guardslots.lua sets.
var slotTagList = sync.OnceValue(func() string {
	var b strings.Builder
	for s := range slots {
		if s > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(slotTag(s))
	}
	return b.String()
})

// guard is the runner's noScript hook: Redis does not know a script, as
// after a restart, so before any script is loaded again it sets the
// restart guard when the server may have lost holds that their holders
// still believe in (see lua/guard.lua): the acquire script then takes no
// fresh hold until the server is as old as Options.MaxTTL, the bound of
// every Engine's leases. A server that cannot say (miniredis, a service
// that refuses INFO in scripts) gets no guard; one that cannot be reached
// fails the call. On a Cluster, the server is the master of key's slot,
// and the guard is set in every slot it serves (see lua/guardslots.lua),
// since the holds of all of them were lost with the script cache; with no
// key (Check), on every master.
func (l *Engine) guard(ctx context.Context, key string) error {
	var err error
	switch {
	case !l.cluster:
		_, err = l.decideGuard(ctx, l.rdb, guardScript, []string{guardKey, guardRunKey})
	case key != "":
		_, err = l.decideGuard(ctx, l.rdb, slotsGuardScript, []string{*slotGuardKey(slotOf(key))})
	default:
		_, err = l.guardMasters(ctx)
	}
	return err
}

// guardMasters decides the restart guard of a Cluster on every master,
// and returns the longest time any of them refuses fresh holds for.
func (l *Engine) guardMasters(ctx context.Context) (time.Duration, error) {
	var (
		mu      sync.Mutex
		longest time.Duration
	)
	err := l.rdb.(*redis.ClusterClient).ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		left, err := l.decideGuard(ctx, node, slotsGuardScript, nil)
		mu.Lock()
		longest = max(longest, left)
		mu.Unlock()
		return err
	})
	return longest, err
}

// readGuard returns how long the guard that the Engines taking locks
// decided still lasts, deciding none: on one server its key's, on a
// Cluster the longest of the masters', each read on the first slot of each
// range the master serves.
func (l *Engine) readGuard(ctx context.Context) (time.Duration, error) {
	keys := []string{guardKey}
	if l.cluster {
		ranges, err := l.rdb.ClusterSlots(ctx).Result()
		if err != nil {
			return 0, unavailable("restart guard", err)
		}
		keys = keys[:0]
		for _, r := range ranges {
			keys = append(keys, *slotGuardKey(int(r.Start)))
		}
	}
	var longest time.Duration
	for _, k := range keys {
		left, err := l.rdb.PTTL(ctx, k).Result()
		if err != nil {
			return 0, unavailable("restart guard", err)
		}
		// No guard key (-2) or none that expires (-1, never set so) come
		// back negative.
		longest = max(longest, left)
	}
	return longest, nil
}

// decideGuard runs s, guardScript or slotsGuardScript, with keys on c, and
// returns how long the guard it decided refuses fresh holds.
func (l *Engine) decideGuard(ctx context.Context, c redis.Scripter, s *script, keys []string) (time.Duration, error) {
	args := []any{l.maxArg}
	if s == slotsGuardScript {
		args = append(args, guardKey+":", slotTagList())
	}
	run := func(v int) ([]int64, error) {
		return c.Eval(ctx, s.src[v].(string), keys, args...).Int64Slice()
	}
	v := l.run.variant()
	r, err := run(v)
	if v == 0 && noShebang(err) {
		l.run.plain.Store(true)
		r, err = run(1)
	}
	if err != nil {
		var reply redis.Error
		switch msg := err.Error(); {
		case errors.Is(err, context.DeadlineExceeded):
			// Not answered by the call's deadline: undecided, so the call
			// fails rather than load a script unguarded.
			return 0, errExpired
		case !errors.As(err, &reply):
			return 0, err // not answered: undecided
		case strings.Contains(msg, "NOPERM") || strings.Contains(msg, "can't run this command"):
			// An ACL that denies INFO (or CLUSTER on a Cluster), or the
			// guard's keys: the guard cannot be decided, so no lock is
			// taken unguarded.
			return 0, fmt.Errorf("%w: the restart guard needs INFO and the keys %s*: %w", lockcore.ErrMisconfigured, guardKey, err)
		case misconfigured(err) || !strings.HasPrefix(msg, "ERR "):
			return 0, err // LOADING, BUSY, READONLY, MOVED, ...: undecided
		}
		return 0, nil // the script failed on a server that does not say when it started (miniredis)
	}
	if len(r) != 2 || r[0] <= 0 {
		return 0, nil
	}
	left := time.Duration(r[0]) * time.Millisecond
	l.noteGuard(left)
	return left, nil
}

// noteGuard notes that the restart guard refuses fresh holds for left
// more, as its decision or a refused acquisition says, and logs it once per
// guard: not again for a guard that ends when the one last logged does
// (within a second, the precision of the server's uptime), however many
// calls meet it.
func (l *Engine) noteGuard(left time.Duration) {
	end := time.Now().Add(left).UnixNano()
	for {
		last := l.guardEnd.Load()
		if end <= last+int64(time.Second) {
			return
		}
		if l.guardEnd.CompareAndSwap(last, end) {
			break
		}
	}
	if l.opt.Logger != nil {
		l.opt.Logger.Warn("routelock: restart guard: Redis started lately without an append-only file and may have lost held locks; no lock is taken until every lease granted before could have ended",
			"for", left.Round(time.Millisecond), "max_ttl", l.opt.MaxTTL)
	}
}

// RestartGuard returns how long the restart guard still refuses fresh
// holds on the Engine's server: 0 when it does not (see "What Redis must
// promise" in the package documentation). It decides the guard, as the
// first call of any Engine after a restart does, when no Engine has yet;
// an OperatorOnly Engine only reads the guard that one decided, with the
// time that guard was set for (an Engine with a longer MaxTTL is refused
// longer). Operators see it in package admin's page and the routelock
// command (lockcore.RestartGuarder). On a Cluster, it is the longest of
// the masters' guards, each of which refuses the locks of the slots that
// master serves.
func (l *Engine) RestartGuard(ctx context.Context) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, l.opt.Timeout)
	defer cancel()
	if l.opt.OperatorOnly {
		return l.readGuard(ctx)
	}
	var left time.Duration
	var err error
	if l.cluster {
		left, err = l.guardMasters(ctx)
	} else {
		left, err = l.decideGuard(ctx, l.rdb, guardScript, []string{guardKey, guardRunKey})
	}
	if err != nil {
		return 0, unavailable("restart guard", err)
	}
	return left, nil
}

// guardError reads the restart guard's refusal from err, a script's
// error reply "GUARD <ms>" (see guard_refusal in lua/hold.lua), noting it;
// nil when err is not one.
func (l *Engine) guardError(err error) error {
	if err == nil || !redis.HasErrorPrefix(err, "GUARD") {
		return nil
	}
	n, perr := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(err.Error(), "GUARD")), 10, 64)
	if perr != nil || n <= 0 {
		n = 1
	}
	left := time.Duration(n) * time.Millisecond
	l.noteGuard(left)
	return &lockcore.RestartGuardError{RetryAfter: left}
}
