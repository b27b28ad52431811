package redisengine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// TestKeptResultMixedLine: on three Engines with default options, a
// holder keeps a result while waiters of both kinds stand in line in a
// random order: those that want the result and plain ones. Each round,
// every waiter that wants the result gets it and takes nothing, and the
// plain ones take the key one after another, each releasing at once:
// none waits for a claim window (a minute here) or times out, and the
// queue is empty and the key free afterwards.
func TestKeptResultMixedLine(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		prefix := redistest.Prefix(t)
		var es []*Engine
		for range 3 {
			es = append(es, newLocker(t, b, prefix, Options{ClaimWindow: time.Minute}))
		}
		rng := rand.New(rand.NewPCG(1, 2))
		const rounds, wants, plains = 20, 5, 3
		for r := range rounds {
			k := mustKey(t, "idempotency", fmt.Sprint("mixed-", r))
			h, err := es[r%3].Take(ctx, lockcore.Request{Key: k, Token: fmt.Sprint("first-", r), Wait: lockcore.FailFast})
			if err != nil {
				t.Fatal(err)
			}
			type got struct {
				want bool
				h    lockcore.Hold
				err  error
			}
			gots := make(chan got, wants+plains)
			kinds := make([]bool, 0, wants+plains)
			for i := range wants + plains {
				kinds = append(kinds, i < wants)
			}
			rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
			for i, want := range kinds {
				e := es[rng.IntN(3)]
				go func() {
					h, err := e.Take(ctx, lockcore.Request{Key: k, Token: fmt.Sprint("w-", r, "-", i), Wait: 8 * time.Second, Result: want})
					if h != nil && !want {
						// A plain holder runs briefly and releases.
						_ = h.Release(ctx, nil)
					}
					gots <- got{want, h, err}
				}()
				// One at a time: the line is in kinds' order.
				eventually(t, 5*time.Second, "the waiter queued", func() bool { return len(inspect(t, es[0], k).Waiters) == i+1 })
			}
			res := []byte(fmt.Sprint("result\n\x00", r))
			start := time.Now()
			if err := es[r%3].Keep(ctx, k, h, res, time.Minute); err != nil {
				t.Fatalf("round %d: Keep: %v", r, err)
			}
			for range wants + plains {
				g := <-gots
				found, isFound := errors.AsType[*lockcore.ResultFound](g.err)
				switch {
				case g.want && g.h != nil:
					t.Fatalf("round %d (line %v): a waiter that wants the result took the key", r, kinds)
				case g.want && (!isFound || !bytes.Equal(found.Result, res)):
					t.Fatalf("round %d (line %v): a waiter that wants the result: %v", r, kinds, g.err)
				case !g.want && g.err != nil:
					t.Fatalf("round %d (line %v): a plain waiter after %v: %v, want the key", r, kinds, time.Since(start), g.err)
				}
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("round %d (line %v): the line took %v to clear, want well under the claim window", r, kinds, d)
			}
			eventually(t, 5*time.Second, "the queue empty and the key free", func() bool {
				info := inspect(t, es[1], k)
				return len(info.Holders) == 0 && len(info.Waiters) == 0
			})
		}
	})
}

// TestResultLineAfterReentry: a holder keeps a result while another
// process re-entered its hold with its token, so the key stays held; the
// re-entry's plain release then hands the key down the line, waiters of
// both kinds in a random order on three Engines. Each waiter that wants
// the result gets it, the plain ones take the key in turn, and nobody
// waits for a claim window (a minute).
func TestResultLineAfterReentry(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		prefix := redistest.Prefix(t)
		var es []*Engine
		for range 3 {
			es = append(es, newLocker(t, b, prefix, Options{ClaimWindow: time.Minute}))
		}
		rng := rand.New(rand.NewPCG(3, 4))
		const rounds, wants, plains = 10, 4, 3
		for r := range rounds {
			k := mustKey(t, "idempotency", fmt.Sprint("reentered-", r))
			tok := fmt.Sprint("first-", r)
			h, err := es[r%3].Take(ctx, lockcore.Request{Key: k, Token: tok, Wait: lockcore.FailFast})
			if err != nil {
				t.Fatal(err)
			}
			in, err := es[(r+1)%3].Take(ctx, lockcore.Request{Key: k, Token: "nested", Join: []string{tok}, Wait: lockcore.FailFast})
			if err != nil {
				t.Fatal(err)
			}
			type got struct {
				want bool
				h    lockcore.Hold
				err  error
			}
			gots := make(chan got, wants+plains)
			kinds := make([]bool, 0, wants+plains)
			for i := range wants + plains {
				kinds = append(kinds, i < wants)
			}
			rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
			for i, want := range kinds {
				e := es[rng.IntN(3)]
				go func() {
					h, err := e.Take(ctx, lockcore.Request{Key: k, Token: fmt.Sprint("w-", r, "-", i), Wait: 8 * time.Second, Result: want})
					if h != nil && !want {
						_ = h.Release(ctx, nil)
					}
					gots <- got{want, h, err}
				}()
				eventually(t, 5*time.Second, "the waiter queued", func() bool { return len(inspect(t, es[0], k).Waiters) == i+1 })
			}
			res := []byte(fmt.Sprint("kept by the first entry ", r))
			if err := es[r%3].Keep(ctx, k, h, res, time.Minute); err != nil {
				t.Fatalf("round %d: Keep: %v", r, err)
			}
			start := time.Now()
			if err := in.Release(ctx, nil); err != nil {
				t.Fatalf("round %d: the re-entry's release: %v", r, err)
			}
			for range wants + plains {
				g := <-gots
				found, isFound := errors.AsType[*lockcore.ResultFound](g.err)
				switch {
				case g.want && g.h != nil:
					t.Fatalf("round %d (line %v): a waiter that wants the result took the key", r, kinds)
				case g.want && (!isFound || !bytes.Equal(found.Result, res)):
					t.Fatalf("round %d (line %v): a waiter that wants the result after %v: %v", r, kinds, time.Since(start), g.err)
				case !g.want && g.err != nil:
					t.Fatalf("round %d (line %v): a plain waiter after %v: %v, want the key", r, kinds, time.Since(start), g.err)
				}
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("round %d (line %v): the line took %v to clear, want well under the claim window", r, kinds, d)
			}
			eventually(t, 5*time.Second, "the queue empty and the key free", func() bool {
				info := inspect(t, es[1], k)
				return len(info.Holders) == 0 && len(info.Waiters) == 0
			})
		}
	})
}

// TestResultOnceUnderCrowds: many keys at once, each wanted by a crowd of
// acquisitions that want its result, spread over three Engines with
// default options, some of them giving up early: whoever takes a key
// runs, then either keeps a result (small, or over 4 KiB) or, sometimes,
// gives the key back with none (a run whose result could not be kept).
// A key is taken once per run that kept nothing, plus once: no
// acquisition takes it after its result was kept, and every one that
// did not give up, and did not take the key, gets the result byte for
// byte.
func TestResultOnceUnderCrowds(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		prefix := redistest.Prefix(t)
		var opt Options
		if !b.Real() {
			// miniredis runs each script in an interpreter written in Go,
			// one at a time: 480 acquisitions at once under the race
			// detector outlast the default second (see miniTimeout).
			opt.Timeout, opt.ReleaseTimeout = miniTimeout, miniTimeout
		}
		var es []*Engine
		for range 3 {
			es = append(es, newLocker(t, b, prefix, opt))
		}
		const keys, crowd = 60, 8
		type tally struct {
			mu             sync.Mutex
			runs, unkept   int
			kept           []byte
			keptAt         time.Time
			afterKeep, bad []string
		}
		tallies := make([]tally, keys)
		var wg sync.WaitGroup
		sem := make(chan struct{}, 24) // keys in flight at once
		for k := range keys {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				key := mustKey(t, "idempotency", fmt.Sprint("crowd-", k))
				tl := &tallies[k]
				res := bytes.Repeat([]byte(fmt.Sprint("\n\x00k", k)), 1+k%3*1500) // over 4 KiB for a third of the keys
				var cw sync.WaitGroup
				for i := range crowd {
					cw.Add(1)
					go func() {
						defer cw.Done()
						rng := rand.New(rand.NewPCG(uint64(k), uint64(i)))
						wait := 5 * time.Second
						if rng.IntN(4) == 0 {
							wait = time.Duration(1+rng.IntN(40)) * time.Millisecond // gives up early
						}
						h, err := es[(k+i)%3].Take(ctx, lockcore.Request{Key: key, Token: fmt.Sprint("c-", k, "-", i), Wait: wait, Result: true})
						if err == nil {
							tl.mu.Lock()
							tl.runs++
							if tl.kept != nil {
								tl.afterKeep = append(tl.afterKeep, fmt.Sprintf("acquisition %d took the key %v after the result was kept", i, time.Since(tl.keptAt)))
							}
							unkept := tl.unkept < 2 && rng.IntN(3) == 0
							if unkept {
								tl.unkept++
							}
							tl.mu.Unlock()
							time.Sleep(time.Duration(rng.IntN(15)) * time.Millisecond) // the run
							if unkept {
								_ = h.Release(ctx, nil)
								return
							}
							tl.mu.Lock()
							tl.kept, tl.keptAt = res, time.Now()
							tl.mu.Unlock()
							if err := es[(k+i)%3].Keep(ctx, key, h, res, time.Minute); err != nil {
								tl.mu.Lock()
								tl.bad = append(tl.bad, fmt.Sprintf("Keep: %v", err))
								tl.mu.Unlock()
							}
							return
						}
						found, ok := errors.AsType[*lockcore.ResultFound](err)
						switch {
						case ok && !bytes.Equal(found.Result, res):
							tl.mu.Lock()
							tl.bad = append(tl.bad, fmt.Sprintf("acquisition %d found %d bytes, want the %d kept", i, len(found.Result), len(res)))
							tl.mu.Unlock()
						case !ok && wait == 5*time.Second:
							tl.mu.Lock()
							tl.bad = append(tl.bad, fmt.Sprintf("acquisition %d: %v", i, err))
							tl.mu.Unlock()
						}
					}()
				}
				cw.Wait()
			}()
		}
		wg.Wait()
		for k := range tallies {
			tl := &tallies[k]
			if len(tl.afterKeep) > 0 || len(tl.bad) > 0 || tl.kept == nil && tl.runs > 0 {
				t.Errorf("key %d: %d runs, %d kept nothing; %v %v", k, tl.runs, tl.unkept, tl.afterKeep, tl.bad)
			}
		}
		for k := range keys {
			key := mustKey(t, "idempotency", fmt.Sprint("crowd-", k))
			eventually(t, 5*time.Second, "every queue empty", func() bool {
				info := inspect(t, es[k%3], key)
				return len(info.Holders) == 0 && len(info.Waiters) == 0
			})
		}
		for i, e := range es {
			eventually(t, 5*time.Second, fmt.Sprint("Engine ", i, " has no waiter registered"), func() bool { return registered(e) == 0 })
		}
	})
}

// registered returns how many waiters l's notifier has registered, and
// how many its shard subscriptions count (on a Cluster).
func registered(l *Engine) int {
	l.nf.mu.Lock()
	n := len(l.nf.waiters)
	l.nf.mu.Unlock()
	if sh := l.nf.sh; sh != nil {
		sh.mu.Lock()
		for _, ss := range sh.slots {
			n += ss.waiters
		}
		sh.mu.Unlock()
	}
	return n
}
