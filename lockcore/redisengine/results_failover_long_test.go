//go:build long

package redisengine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestSentinelFailoverResults: requests that must run once per key, three
// duplicates of each key sent at once from 3 Engines (each on a failover
// client of its own at go-redis's defaults, TTL 10s), run through a master
// with 2 replicas under 3 sentinels while the master changes. A request
// takes the key or its stored result (Request.Result); one that takes the
// key runs, counted, and keeps its result with its release (Keep). Every
// result found is one a run of its key kept (the one run's, where a key runs
// once), and:
//
//   - the old master SIGKILLed, at the Engine's defaults (Replicas 1 on
//     Sentinel): no key runs twice;
//   - SENTINEL FAILOVER with the old master alive, Replicas 2 (every
//     replica): no key runs twice; requests in the switch window fail
//     (503) instead;
//   - SENTINEL FAILOVER at the defaults: the switch window loses what the
//     old master granted and kept in it, as docs/idempotency.md says. Until
//     the clients learn of the new master they go on with the old one,
//     whose other replica acknowledges them until Sentinel points it at
//     the new master, which never saw them: keys run in that window run
//     again, and a duplicate still sent to the old master may meet the
//     first run's result after the second run kept its own. The log says
//     how many; none first ran before the failover began or 10s after it.
//
// Each key is asked once more at the end, waiting in line behind a hold
// whose Keep failed and goes on in the background: it gets the result, or
// the key, which counts as a second run.
func TestSentinelFailoverResults(t *testing.T) {
	if redistest.OwnReal(t) == nil { // redis-server is not on PATH
		return
	}
	for _, c := range []struct {
		how      string
		replicas int
	}{{"sentinel-failover", 0}, {"sentinel-failover", 2}, {"kill-master", 0}} {
		t.Run(fmt.Sprintf("%s/replicas=%d", c.how, c.replicas), func(t *testing.T) { testFailoverResults(t, c.how, c.replicas) })
	}
}

// resultLoad is the load of TestSentinelFailoverResults: 4 groups of 3
// workers, one on each Engine; the workers of a group send each key of
// their group's sequence together.
type resultLoad struct {
	mu       sync.Mutex
	runs     map[string]int      // runs per key
	kept     map[string][]string // the results each key's runs kept
	wrong    []string            // results found that no run of their key kept
	requests atomic.Int64        // requests answered, by a run or a result
	found    atomic.Int64        // of them answered by a result
	errs     atomic.Int64        // acquisitions that failed
	keepErrs atomic.Int64        // Keeps that failed (they go on in the background)
	lastErr  atomic.Value
	first    map[string]time.Time // when each key first ran
}

func testFailoverResults(t *testing.T, how string, replicas int) {
	set := ownSet(t, redistest.StartSentinelSet)
	engines := enginesOn(t, set, 3, Options{Prefix: redistest.Prefix(t), Replicas: replicas})
	rl := &resultLoad{runs: map[string]int{}, kept: map[string][]string{}, first: map[string]time.Time{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	deadline := time.Now().Add(150 * time.Second)
	for g := range 4 {
		for e := range engines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 100000 && time.Now().Before(deadline); i++ {
					select {
					case <-stop:
						return
					default:
					}
					rl.request(engines[e], fmt.Sprintf("g%d-%d", g, i), e)
				}
			}()
		}
	}
	var once sync.Once
	end := func() { once.Do(func() { close(stop); wg.Wait() }) }
	defer end()
	waitFor(t, 30*time.Second, "1000 requests before the switch", func() bool { return rl.requests.Load() >= 1000 })
	switched := time.Now()
	failOver(t, set, how)
	at := rl.requests.Load()
	waitFor(t, 60*time.Second, "2000 requests after the switch", func() bool { return rl.requests.Load() >= at+2000 })
	end()
	// The Keeps that failed go on in the background while their holds'
	// leases last: a duplicate of such a key would run it again once the
	// lease ran out. Each key is asked once more, waiting in line behind
	// such a hold: it gets the result, or the key.
	rl.mu.Lock()
	keys := make([]string, 0, len(rl.runs))
	for k := range rl.runs {
		keys = append(keys, k)
	}
	rl.mu.Unlock()
	ctx := context.Background()
	for _, k := range keys {
		key := mustKey(t, "once", k)
		waitFor(t, 30*time.Second, "a key's result or its lock", func() bool {
			h, err := engines[0].Take(ctx, lockcore.Request{Key: key, Token: lifecycle.NewToken(), Wait: 12 * time.Second, Result: true})
			if h != nil {
				_ = h.Release(ctx, nil)
			}
			var found *lockcore.ResultFound
			switch {
			case errors.As(err, &found):
				return true
			case err == nil:
				rl.mu.Lock()
				rl.runs[k]++ // the result was lost: a retry would run it again
				rl.mu.Unlock()
				return true
			}
			return false // 503 for now
		})
	}
	rl.mu.Lock()
	defer rl.mu.Unlock()
	twice := 0
	var from, to time.Duration // when the keys run twice first ran, after the failover began
	for k, n := range rl.runs {
		if n < 2 {
			continue
		}
		at := rl.first[k].Sub(switched)
		if twice == 0 || at < from {
			from = at
		}
		to = max(to, at)
		twice++
		if at < 0 || at > 10*time.Second || replicas != 0 || how == "kill-master" {
			t.Errorf("%s ran %d times, first %v after the failover began", k, n, at)
		}
	}
	lastErr, _ := rl.lastErr.Load().(string)
	t.Logf("%d keys, %d requests (%d answered by a stored result); %d keys run twice, first run %v to %v after the failover began; %d failed acquisitions, %d failed Keeps (last error: %s)",
		len(rl.runs), rl.requests.Load(), rl.found.Load(), twice, from.Round(time.Millisecond), to.Round(time.Millisecond), rl.errs.Load(), rl.keepErrs.Load(), lastErr)
	if len(rl.wrong) > 0 {
		t.Errorf("%d results found that no run of their key kept, such as %s", len(rl.wrong), rl.wrong[0])
	}
}

// request is one request of key k on e, the Engine of worker w: the key's
// stored result, or a run that keeps one.
func (rl *resultLoad) request(e *Engine, k string, w int) {
	key, err := lockcore.NewKey("once", k)
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, err := e.Take(ctx, lockcore.Request{Key: key, Token: lifecycle.NewToken(), Wait: 4 * time.Second, Result: true})
	var found *lockcore.ResultFound
	switch {
	case errors.As(err, &found):
		rl.requests.Add(1)
		rl.found.Add(1)
		rl.mu.Lock()
		if !slices.Contains(rl.kept[k], string(found.Result)) {
			rl.wrong = append(rl.wrong, fmt.Sprintf("%s: %q, kept %q", k, found.Result, rl.kept[k]))
		}
		rl.mu.Unlock()
		return
	case err != nil:
		rl.errs.Add(1)
		rl.lastErr.Store(err.Error())
		return
	}
	rl.mu.Lock()
	rl.runs[k]++
	if rl.runs[k] == 1 {
		rl.first[k] = time.Now()
	}
	res := fmt.Sprintf("%s by %d, run %d", k, w, rl.runs[k])
	rl.kept[k] = append(rl.kept[k], res)
	rl.mu.Unlock()
	rl.requests.Add(1)
	if err := e.Keep(ctx, key, h, []byte(res), time.Hour); err != nil {
		rl.keepErrs.Add(1)
		rl.lastErr.Store(err.Error())
	}
}
