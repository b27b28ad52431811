package lockotel

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/routelock/lock/internal/classifytest"
	"github.com/routelock/lock/lockcore"
)

// TestOutcomeOf: the outcome of each kind of error an engine returns,
// as the Redis engine and the in-memory one return them.
func TestOutcomeOf(t *testing.T) {
	live := context.Background()
	cancelled, cancel := context.WithCancel(live)
	cancel()
	expired, cancel2 := context.WithTimeout(live, 0)
	defer cancel2()
	<-expired.Done()
	busy := &lockcore.ContentionError{Key: "k"}
	timedOut := &lockcore.ContentionError{Key: "k", TimedOut: true}
	down := fmt.Errorf("%w: acquire: dial tcp: connection refused", lockcore.ErrUnavailable)
	for _, tc := range []struct {
		ctx  context.Context
		err  error
		want string
	}{
		{live, nil, "acquired"},
		{live, busy, "busy"},
		{live, timedOut, "wait_timeout"},
		{cancelled, errors.Join(busy, context.Canceled), "cancelled"},
		{expired, errors.Join(timedOut, context.DeadlineExceeded), "cancelled"},
		{expired, errors.Join(down, context.DeadlineExceeded), "unavailable"}, // Redis silent until the deadline: 503
		{live, errors.Join(busy, context.Canceled), "busy"},                   // not this request's context
		{live, down, "unavailable"},
		{live, lockcore.ErrClosed, "unavailable"},
		{live, fmt.Errorf("%w: WRONGPASS", lockcore.ErrMisconfigured), "error"},
		{live, fmt.Errorf("%w: zero Key", lockcore.ErrInvalidKey), "error"},
		{live, errors.New("something else"), "error"},
		{live, &lockcore.ResultFound{Result: []byte("201")}, "result"},
		{cancelled, fmt.Errorf("idempotent: %w", &lockcore.ResultFound{}), "result"},
	} {
		if got := outcomeOf(tc.ctx, tc.err); got != tc.want {
			t.Errorf("outcomeOf(ctx %v, %v) = %s, want %s", tc.ctx.Err(), tc.err, got, tc.want)
		}
	}
}

// classifyAtom is one error an engine may return (and errors of key
// functions, which no engine returns): a sentinel of
// lockcore, keyfunc or the context package, an engine's error, or an error
// nobody knows.
type classifyAtom struct {
	name string
	err  error
}

// classifyAtoms are the errors TestOutcomeOfEveryError runs through
// outcomeOf, alone, wrapped, and joined in pairs.
var classifyAtoms = func() []classifyAtom {
	var out []classifyAtom
	for _, a := range classifytest.Atoms() {
		out = append(out, classifyAtom{a.Name, a.Err})
	}
	return out
}()

// outcomeLetters abbreviate the outcomes in outcomePairs.
var outcomeLetters = map[string]string{
	outcomeAcquired:    "a",
	outcomeBusy:        "b",
	outcomeWaitTimeout: "w",
	outcomeCancelled:   "c",
	outcomeUnavailable: "u",
	outcomeError:       "e",
}

// TestOutcomeOfEveryError: outcomeOf gives each error, alone, wrapped
// (with fmt.Errorf, or next to a context error) and joined with each other
// error, under a live, a cancelled and an expired context, the outcome it
// gave before it was written as a table over internal/outcome. The
// outcomes below were recorded from the classifier that matched each
// sentinel in its own switch.
func TestOutcomeOfEveryError(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel2()
	ctxs := []struct {
		name string
		ctx  context.Context
	}{{"live", context.Background()}, {"cancelled", cancelled}, {"expired", expired}}

	var got strings.Builder
	got.WriteString("\n")
	line := func(name string, err error) {
		fmt.Fprintf(&got, "%s:", name)
		for _, c := range ctxs {
			fmt.Fprintf(&got, " %s", outcomeOf(c.ctx, err))
		}
		got.WriteString("\n")
	}
	line("nil", nil)
	for _, a := range classifyAtoms {
		line(a.name, a.err)
	}
	for _, a := range classifyAtoms {
		line("wrapped "+a.name, fmt.Errorf("acquire %q: %w", "k", a.err))
		line("twice wrapped "+a.name, fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", a.err)))
		line(a.name+" with Canceled", fmt.Errorf("%w: %w", a.err, context.Canceled))
		line(a.name+" with Deadline", fmt.Errorf("%w: %w", a.err, context.DeadlineExceeded))
	}
	if g := got.String(); g != outcomeSingles {
		t.Errorf("outcomes changed; now:\n%s", g)
	}

	// Each ordered pair, joined: a cell is the outcome under each context
	// (live, cancelled, expired), each as its letter in outcomeLetters.
	got.Reset()
	got.WriteString("\n")
	for _, a := range classifyAtoms {
		row := fmt.Sprintf("%-13s", a.name)
		for _, b := range classifyAtoms {
			row += " "
			for _, c := range ctxs {
				out := outcomeOf(c.ctx, errors.Join(a.err, b.err))
				l, ok := outcomeLetters[out]
				if !ok {
					t.Errorf("Join(%s, %s) under a %s context: outcome %q has no letter", a.name, b.name, c.name, out)
				}
				row += l
			}
		}
		got.WriteString(row + "\n")
	}
	if g := got.String(); g != outcomePairs {
		t.Errorf("outcomes of joined pairs changed; now:\n%s", g)
	}
}

// outcomeSingles are the outcomes of single errors under a live, a
// cancelled and an expired context.
const outcomeSingles = `
nil: acquired acquired acquired
NotAcquired: busy busy busy
WaitTimeout: wait_timeout wait_timeout wait_timeout
Busy: busy busy busy
TimedOut: wait_timeout wait_timeout wait_timeout
LockLost: error error error
Revoked: error error error
Unavailable: unavailable unavailable unavailable
Misconfigured: error error error
InvalidKey: error error error
InvalidToken: error error error
Released: error error error
Closed: unavailable unavailable unavailable
NotHeld: error error error
Canceled: error cancelled cancelled
Deadline: error cancelled cancelled
Skip: error error error
Missing: error error error
Invalid: error error error
TooLarge: error error error
KeyMissing: error error error
KeyTooLarge: error error error
KeyNotRouted: error error error
KeyCustom: error error error
NoRoute: error error error
Other: error error error
wrapped NotAcquired: busy busy busy
twice wrapped NotAcquired: busy busy busy
NotAcquired with Canceled: busy cancelled cancelled
NotAcquired with Deadline: busy cancelled cancelled
wrapped WaitTimeout: wait_timeout wait_timeout wait_timeout
twice wrapped WaitTimeout: wait_timeout wait_timeout wait_timeout
WaitTimeout with Canceled: wait_timeout cancelled cancelled
WaitTimeout with Deadline: wait_timeout cancelled cancelled
wrapped Busy: busy busy busy
twice wrapped Busy: busy busy busy
Busy with Canceled: busy cancelled cancelled
Busy with Deadline: busy cancelled cancelled
wrapped TimedOut: wait_timeout wait_timeout wait_timeout
twice wrapped TimedOut: wait_timeout wait_timeout wait_timeout
TimedOut with Canceled: wait_timeout cancelled cancelled
TimedOut with Deadline: wait_timeout cancelled cancelled
wrapped LockLost: error error error
twice wrapped LockLost: error error error
LockLost with Canceled: error cancelled cancelled
LockLost with Deadline: error cancelled cancelled
wrapped Revoked: error error error
twice wrapped Revoked: error error error
Revoked with Canceled: error cancelled cancelled
Revoked with Deadline: error cancelled cancelled
wrapped Unavailable: unavailable unavailable unavailable
twice wrapped Unavailable: unavailable unavailable unavailable
Unavailable with Canceled: unavailable unavailable unavailable
Unavailable with Deadline: unavailable unavailable unavailable
wrapped Misconfigured: error error error
twice wrapped Misconfigured: error error error
Misconfigured with Canceled: error cancelled cancelled
Misconfigured with Deadline: error cancelled cancelled
wrapped InvalidKey: error error error
twice wrapped InvalidKey: error error error
InvalidKey with Canceled: error cancelled cancelled
InvalidKey with Deadline: error cancelled cancelled
wrapped InvalidToken: error error error
twice wrapped InvalidToken: error error error
InvalidToken with Canceled: error cancelled cancelled
InvalidToken with Deadline: error cancelled cancelled
wrapped Released: error error error
twice wrapped Released: error error error
Released with Canceled: error cancelled cancelled
Released with Deadline: error cancelled cancelled
wrapped Closed: unavailable unavailable unavailable
twice wrapped Closed: unavailable unavailable unavailable
Closed with Canceled: unavailable unavailable unavailable
Closed with Deadline: unavailable unavailable unavailable
wrapped NotHeld: error error error
twice wrapped NotHeld: error error error
NotHeld with Canceled: error cancelled cancelled
NotHeld with Deadline: error cancelled cancelled
wrapped Canceled: error cancelled cancelled
twice wrapped Canceled: error cancelled cancelled
Canceled with Canceled: error cancelled cancelled
Canceled with Deadline: error cancelled cancelled
wrapped Deadline: error cancelled cancelled
twice wrapped Deadline: error cancelled cancelled
Deadline with Canceled: error cancelled cancelled
Deadline with Deadline: error cancelled cancelled
wrapped Skip: error error error
twice wrapped Skip: error error error
Skip with Canceled: error cancelled cancelled
Skip with Deadline: error cancelled cancelled
wrapped Missing: error error error
twice wrapped Missing: error error error
Missing with Canceled: error cancelled cancelled
Missing with Deadline: error cancelled cancelled
wrapped Invalid: error error error
twice wrapped Invalid: error error error
Invalid with Canceled: error cancelled cancelled
Invalid with Deadline: error cancelled cancelled
wrapped TooLarge: error error error
twice wrapped TooLarge: error error error
TooLarge with Canceled: error cancelled cancelled
TooLarge with Deadline: error cancelled cancelled
wrapped KeyMissing: error error error
twice wrapped KeyMissing: error error error
KeyMissing with Canceled: error cancelled cancelled
KeyMissing with Deadline: error cancelled cancelled
wrapped KeyTooLarge: error error error
twice wrapped KeyTooLarge: error error error
KeyTooLarge with Canceled: error cancelled cancelled
KeyTooLarge with Deadline: error cancelled cancelled
wrapped KeyNotRouted: error error error
twice wrapped KeyNotRouted: error error error
KeyNotRouted with Canceled: error cancelled cancelled
KeyNotRouted with Deadline: error cancelled cancelled
wrapped KeyCustom: error error error
twice wrapped KeyCustom: error error error
KeyCustom with Canceled: error cancelled cancelled
KeyCustom with Deadline: error cancelled cancelled
wrapped NoRoute: error error error
twice wrapped NoRoute: error error error
NoRoute with Canceled: error cancelled cancelled
NoRoute with Deadline: error cancelled cancelled
wrapped Other: error error error
twice wrapped Other: error error error
Other with Canceled: error cancelled cancelled
Other with Deadline: error cancelled cancelled
`

// outcomePairs are the outcomes of errors.Join(row, column), the columns in
// the order of the rows (classifyAtoms), each cell under a live, a
// cancelled and an expired context.
const outcomePairs = `
NotAcquired   bbb www bbb www bbb bbb uuu bbb bbb bbb bbb uuu bbb bcc bcc bbb bbb bbb bbb bbb bbb bbb bbb bbb bbb
WaitTimeout   www www www www www www uuu www www www www uuu www wcc wcc www www www www www www www www www www
Busy          bbb www bbb www bbb bbb uuu bbb bbb bbb bbb uuu bbb bcc bcc bbb bbb bbb bbb bbb bbb bbb bbb bbb bbb
TimedOut      www www www www www www uuu www www www www uuu www wcc wcc www www www www www www www www www www
LockLost      bbb www bbb www eee eee uuu eee eee eee eee uuu eee ecc ecc eee eee eee eee eee eee eee eee eee eee
Revoked       bbb www bbb www eee eee uuu eee eee eee eee uuu eee ecc ecc eee eee eee eee eee eee eee eee eee eee
Unavailable   uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu
Misconfigured bbb www bbb www eee eee uuu eee eee eee eee uuu eee ecc ecc eee eee eee eee eee eee eee eee eee eee
InvalidKey    bbb www bbb www eee eee uuu eee eee eee eee uuu eee ecc ecc eee eee eee eee eee eee eee eee eee eee
InvalidToken  bbb www bbb www eee eee uuu eee eee eee eee uuu eee ecc ecc eee eee eee eee eee eee eee eee eee eee
Released      bbb www bbb www eee eee uuu eee eee eee eee uuu eee ecc ecc eee eee eee eee eee eee eee eee eee eee
Closed        uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu uuu
NotHeld       bbb www bbb www eee eee uuu eee eee eee eee uuu eee ecc ecc eee eee eee eee eee eee eee eee eee eee
Canceled      bcc wcc bcc wcc ecc ecc uuu ecc ecc ecc ecc uuu ecc ecc ecc ecc ecc ecc ecc ecc ecc ecc ecc ecc ecc
Deadline      bcc wcc bcc wcc ecc ecc uuu ecc ecc ecc ecc uuu ecc ecc ecc ecc ecc ecc ecc ecc ecc ecc ecc ecc ecc
Skip          bbb www bbb www eee eee uuu eee eee eee eee uuu eee ecc ecc eee eee eee eee eee eee eee eee eee eee
Missing       bbb www bbb www eee eee uuu eee eee eee eee uuu eee ecc ecc eee eee eee eee eee eee eee eee eee eee
Invalid       bbb www bbb www eee eee uuu eee eee eee eee uuu eee ecc ecc eee eee eee eee eee eee eee eee eee eee
TooLarge      bbb www bbb www eee eee uuu eee eee eee eee uuu eee ecc ecc eee eee eee eee eee eee eee eee eee eee
KeyMissing    bbb www bbb www eee eee uuu eee eee eee eee uuu eee ecc ecc eee eee eee eee eee eee eee eee eee eee
KeyTooLarge   bbb www bbb www eee eee uuu eee eee eee eee uuu eee ecc ecc eee eee eee eee eee eee eee eee eee eee
KeyNotRouted  bbb www bbb www eee eee uuu eee eee eee eee uuu eee ecc ecc eee eee eee eee eee eee eee eee eee eee
KeyCustom     bbb www bbb www eee eee uuu eee eee eee eee uuu eee ecc ecc eee eee eee eee eee eee eee eee eee eee
NoRoute       bbb www bbb www eee eee uuu eee eee eee eee uuu eee ecc ecc eee eee eee eee eee eee eee eee eee eee
Other         bbb www bbb www eee eee uuu eee eee eee eee uuu eee ecc ecc eee eee eee eee eee eee eee eee eee eee
`

// TestReasonOf: the reason of each kind of loss.
func TestReasonOf(t *testing.T) {
	for _, tc := range []struct {
		cause error
		want  string
	}{
		{fmt.Errorf("%w: by an operator", lockcore.ErrRevoked), "revoked"},
		{fmt.Errorf("%w: %w", lockcore.ErrLockLost, lockcore.ErrClosed), "closed"},
		{fmt.Errorf("%w: %w: renewals failed until the lease ran out", lockcore.ErrLockLost, lockcore.ErrUnavailable), "expired"},
		{fmt.Errorf("%w: the key is gone or held by another owner", lockcore.ErrLockLost), "gone"},
		{lockcore.ErrLockLost, "gone"},
	} {
		if got := reasonOf(tc.cause); got != tc.want {
			t.Errorf("reasonOf(%v) = %s, want %s", tc.cause, got, tc.want)
		}
	}
}

// TestAttrCacheBounded: past maxCached attribute sets the cache keeps no
// more, and still answers.
func TestAttrCacheBounded(t *testing.T) {
	defer func(n int) { maxCached = n }(maxCached)
	maxCached = 64
	var c attrCache
	for i := range maxCached + 10 {
		if m := c.get(kindResource, fmt.Sprint("r", i), "", ""); m == nil || len(m.add) != 1 || len(m.rec) != 1 {
			t.Fatalf("get %d: %+v", i, m)
		}
	}
	if n := len(*c.m.Load()); n != maxCached {
		t.Fatalf("%d sets cached, want %d", n, maxCached)
	}
	if a, b := c.get(kindResource, "r1", "", ""), c.get(kindResource, "r1", "", ""); a != b {
		t.Fatal("a cached set was made again")
	}
	if a, b := c.get(kindAcquire, "r1", "/a", "acquired"), c.get(kindAcquire, "r1", "/b", "acquired"); a == b {
		t.Fatal("two routes share a set")
	}
}

// TestEventsAllocateNothing: on providers that record nothing, the events
// of a steady state (attribute sets made) allocate nothing.
func TestEventsAllocateNothing(t *testing.T) {
	tel := New(Config{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: noop.NewMeterProvider()}).(*telemetry)
	k, _ := lockcore.NewKey("productID", "42")
	lost := fmt.Errorf("%w: gone", lockcore.ErrLockLost)
	ctx := context.Background()
	run := func() {
		tel.Waiting(k, 1)
		tel.Woken(k, "message")
		tel.Waiting(k, -1)
		tel.Renewed(k, nil)
		tel.Ended(ctx, k, 1, 0, lost, nil)
	}
	run()
	if n := testing.AllocsPerRun(100, run); n != 0 {
		t.Fatalf("%v allocations per round of events", n)
	}
}

// TestLiveCountsPastTheCache: holds and waits of resources met after the
// attribute cache is full are still counted, under resource _other, and
// routelock.held and routelock.waiting return to 0 when they end.
func TestLiveCountsPastTheCache(t *testing.T) {
	defer func(n int) { maxCached = n }(maxCached)
	maxCached = 4
	reader := sdkmetric.NewManualReader()
	tel := New(Config{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))}).(*telemetry)
	ctx := context.Background()
	live := func() map[string][2]int64 {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(ctx, &rm); err != nil {
			t.Fatal(err)
		}
		got := map[string][2]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				i := map[string]int{"routelock.held": 0, "routelock.waiting": 1}
				j, ok := i[m.Name]
				if !ok {
					continue
				}
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					r, _ := dp.Attributes.Value(attrResource)
					v := got[r.AsString()]
					v[j] += dp.Value
					got[r.AsString()] = v
				}
			}
		}
		return got
	}
	var keys []lockcore.Key
	for i := range 10 {
		k, _ := lockcore.NewKey(fmt.Sprint("r", i), "1")
		keys = append(keys, k)
		tel.Waiting(k, 1)
		tel.attrs.get(kindResource, k.Name(), "", "").held.Add(1) // as Acquire counts a fresh hold
	}
	got := live()
	var held, waiting int64
	for _, v := range got {
		held += v[0]
		waiting += v[1]
	}
	if held != 10 || waiting != 10 || got[otherResource][0] != 10-int64(maxCached) {
		t.Fatalf("live counts %v: held %d, waiting %d, want 10 and 10 with %d under %s", got, held, waiting, 10-maxCached, otherResource)
	}
	for _, k := range keys {
		tel.Waiting(k, -1)
		tel.Ended(ctx, k, 1, 0, lockcore.ErrReleased, nil)
	}
	for r, v := range live() {
		if v != [2]int64{} {
			t.Errorf("%s: held, waiting = %v after every hold and wait ended, want 0", r, v)
		}
	}
}
