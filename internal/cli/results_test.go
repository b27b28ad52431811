package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/routelock/lock/internal/idem"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/operate"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
)

// TestResultsRedis runs results and drop against Redis (a real
// redis-server when one is on PATH, and with the long tag a Cluster and
// Sentinel too): an application's engine stores three results as the
// idempotency middleware does; results lists them by lookup key, size and
// expiry, as a table and as JSON, under a prefix and a limit; drop drops
// one, which the engine then no longer has, and a second drop exits 3.
// Nothing printed shows a client's idempotency key or a stored body.
func TestResultsRedis(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		name, value := b.Env()
		env := map[string]string{name: value}
		cli := func(args ...string) result {
			t.Helper()
			return runWith(t, env, append([]string{"-prefix", prefix}, args...)...)
		}
		app, err := redisengine.New(b.Universal(t), redisengine.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { app.Close() })

		type stored struct {
			key          lockcore.Key
			client, body string
			keep         time.Duration
		}
		ss := []stored{
			{client: "client-key-a9f3e1", body: "body-secret-1", keep: time.Hour},
			{client: "client-key-77b0c2", body: "body-secret-2", keep: 2 * time.Hour},
			{client: "client-key-0d4e55", body: "body-secret-3", keep: 30 * time.Minute},
		}
		ops := [][]string{{"POST", "/orders"}, {"POST", "/orders"}, {"POST", "/refunds/{id}"}}
		ctx := t.Context()
		for i := range ss {
			k, err := idem.LockKey(ops[i], "", ss[i].client)
			if err != nil {
				t.Fatal(err)
			}
			ss[i].key = k
			lease, err := lifecycle.Serve(app, nil).Acquire(ctx, k, lifecycle.Policy{Wait: lockcore.FailFast, TTL: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			rec := idem.Record{Status: 201, Body: []byte(ss[i].body)}
			if err := lifecycle.Keep(ctx, lease, rec.Encode(), ss[i].keep); err != nil {
				t.Fatal(err)
			}
		}
		noSecrets := func(what string, r result) {
			t.Helper()
			for _, s := range ss {
				if strings.Contains(r.stdout+r.stderr, s.client) || strings.Contains(r.stdout+r.stderr, s.body) {
					t.Fatalf("%s shows a client's key or a stored body:\n%s%s", what, r.stdout, r.stderr)
				}
			}
		}
		keys := []string{ss[0].key.String(), ss[1].key.String(), ss[2].key.String()}
		slices.Sort(keys)

		before := time.Now()
		r := cli("-json", "results")
		noSecrets("results -json", r)
		var l operate.Results
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &l) != nil || len(l.Results) != 3 || l.More {
			t.Fatalf("results -json: %d %q\n%s", r.code, r.stderr, r.stdout)
		}
		for i, res := range l.Results {
			if res.Key != keys[i] || res.Size < int64(len(ss[0].body)) {
				t.Errorf("result %d: %+v, want key %s", i, res, keys[i])
			}
			for _, s := range ss {
				if s.key.String() == res.Key {
					if left := res.Expires.Sub(before); left > s.keep+time.Second || left < s.keep-time.Minute {
						t.Errorf("%s: expires in %v, kept for %v", res.Key, left, s.keep)
					}
				}
			}
		}

		r = cli("results")
		noSecrets("results", r)
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		if r.code != 0 || len(lines) != 4 || !strings.HasPrefix(lines[0], "KEY ") || !strings.Contains(lines[0], " BYTES ") {
			t.Fatalf("results: %d %q\n%s", r.code, r.stderr, r.stdout)
		}
		for i, k := range keys {
			if !strings.HasPrefix(lines[i+1], k+" ") || !strings.Contains(lines[i+1], fmt.Sprintf(" %d ", l.Results[i].Size)) || !strings.Contains(lines[i+1], "(in ") {
				t.Errorf("results line %d: %q, want %s with size %d and its expiry", i+1, lines[i+1], k, l.Results[i].Size)
			}
		}

		orders := ss[0].key.String()
		orders = orders[:strings.Index(orders, ":~:")+1]
		l = operate.Results{}
		if r := cli("results", orders, "-json"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &l) != nil || len(l.Results) != 2 ||
			!strings.HasPrefix(l.Results[0].Key, orders) || !strings.HasPrefix(l.Results[1].Key, orders) {
			t.Errorf("results %s: %d %q\n%s", orders, r.code, r.stderr, r.stdout)
		}
		if r := cli("results", "-limit", "1"); r.code != 0 || strings.Count(r.stdout, "\n") != 2 || !strings.Contains(r.stderr, "more results than -limit 1") {
			t.Errorf("results -limit 1: %d %q\n%s", r.code, r.stderr, r.stdout)
		}
		l = operate.Results{}
		if r := cli("results", "-limit", "0", "-json"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &l) != nil || len(l.Results) != 3 || l.More {
			t.Errorf("results -limit 0: %d %q\n%s", r.code, r.stderr, r.stdout)
		}

		r = cli("drop", ss[0].key.String())
		if r.code != 0 || r.stdout != "dropped the stored result of "+ss[0].key.String()+": the next request with its idempotency key runs again\n" {
			t.Fatalf("drop: %d %q %q", r.code, r.stdout, r.stderr)
		}
		if _, ok, err := app.Result(ctx, ss[0].key); err != nil || ok {
			t.Fatalf("after the drop the engine still has the result: %v %v", ok, err)
		}
		if _, ok, err := app.Result(ctx, ss[1].key); err != nil || !ok {
			t.Fatalf("the drop of one result dropped another: %v %v", ok, err)
		}
		if r := cli("drop", ss[0].key.String()); r.code != exitNotHeld || r.stderr != "routelock: no result is stored for "+ss[0].key.String()+"\n" {
			t.Errorf("a second drop: %d %q", r.code, r.stderr)
		}
		var d operate.Dropped
		if r := cli("drop", "-json", ss[2].key.String()); r.code != 0 || json.Unmarshal([]byte(r.stdout), &d) != nil || d.Dropped != ss[2].key.String() {
			t.Errorf("drop -json: %d %q %q", r.code, r.stdout, r.stderr)
		}
		if r := cli("results"); r.code != 0 || strings.Count(r.stdout, "\n") != 2 || !strings.Contains(r.stdout, ss[1].key.String()) {
			t.Errorf("results after two drops: %d\n%s", r.code, r.stdout)
		}
		if r := cli("results", "nothing:"); r.code != 0 || r.stdout != "no result is stored\n" {
			t.Errorf("results nothing: %d %q", r.code, r.stdout)
		}
	})
}

// resultsOp is a fakeOp whose engine keeps results: st, in key order.
type resultsOp struct {
	*fakeOp
	st      []lockcore.StoredResult
	dropped []string
	limit   int
}

func (o *resultsOp) Take(context.Context, lockcore.Request) (lockcore.Hold, error) {
	return nil, lockcore.ErrMisconfigured
}
func (o *resultsOp) Promises() lockcore.Promises { return lockcore.Promises{Results: true} }
func (o *resultsOp) Close() error                { return nil }
func (o *resultsOp) Result(context.Context, lockcore.Key) ([]byte, bool, error) {
	return nil, false, nil
}
func (o *resultsOp) Keep(context.Context, lockcore.Key, lockcore.Hold, []byte, time.Duration) error {
	return lockcore.ErrMisconfigured
}

func (o *resultsOp) DropResult(_ context.Context, key lockcore.Key) (bool, error) {
	if o.err != nil {
		return false, o.err
	}
	o.dropped = append(o.dropped, key.String())
	i := slices.IndexFunc(o.st, func(r lockcore.StoredResult) bool { return r.Key == key })
	if i < 0 {
		return false, nil
	}
	o.st = slices.Delete(o.st, i, i+1)
	return true, nil
}

func (o *resultsOp) StoredResults(_ context.Context, prefix string, limit int) ([]lockcore.StoredResult, bool, error) {
	o.prefix, o.limit = prefix, limit
	if o.err != nil {
		return nil, false, o.err
	}
	var out []lockcore.StoredResult
	for _, r := range o.st {
		if strings.HasPrefix(r.Key.String(), prefix) {
			out = append(out, r)
		}
	}
	if len(out) > limit {
		return out[:limit], true, nil
	}
	return out, false, nil
}

// sampleResults returns a resultsOp with two stored results, expiring at
// at plus an hour and plus a minute.
func sampleResults(t *testing.T, at time.Time) *resultsOp {
	t.Helper()
	a, err := lockcore.NewKey("idempotency", "POST", "/orders", "~", "00112233445566778899aabbccddeeff")
	if err != nil {
		t.Fatal(err)
	}
	b, err := lockcore.NewKey("idempotency", "POST", "/refunds/{id}", "=tenant-7", "ffeeddccbbaa99887766554433221100")
	if err != nil {
		t.Fatal(err)
	}
	return &resultsOp{fakeOp: sampleOp(), st: []lockcore.StoredResult{
		{Key: a, Size: 1234, Expires: at.Add(time.Hour)},
		{Key: b, Size: 56, Expires: at.Add(time.Minute)},
	}}
}

// TestResultsFake: results and drop as a table and as JSON, their
// operands checked before connecting, the limit and prefix passed on
// (-limit 0 as all), a drop of nothing exit 3, the backend's failure exit
// 1; an engine that keeps no results makes both exit 1 saying so.
func TestResultsFake(t *testing.T) {
	op := sampleResults(t, now)
	opened := withOp(t, op)
	r := runWith(t, nil, "results")
	want := "KEY                                                                            BYTES  EXPIRES\n" +
		"idempotency:POST:/orders:~:00112233445566778899aabbccddeeff                    1234   " + now.Add(time.Hour).UTC().Format("2006-01-02T15:04:05.000Z") + " (in 1h0m)\n" +
		"idempotency:POST:/refunds/%7Bid%7D:=tenant-7:ffeeddccbbaa99887766554433221100  56     " + now.Add(time.Minute).UTC().Format("2006-01-02T15:04:05.000Z") + " (in 1m0s)\n"
	if r.code != 0 || r.stdout != want || r.stderr != "" {
		t.Errorf("results: %d %q\n%s\nwant\n%s", r.code, r.stderr, r.stdout, want)
	}
	if op.prefix != "" || op.limit != defaultLimit {
		t.Errorf("results asked for %q, %d", op.prefix, op.limit)
	}
	if r := runWith(t, nil, "results", "idempotency:POST:/refunds", "-limit", "0"); r.code != 0 || op.prefix != "idempotency:POST:/refunds" || op.limit <= 1<<30 ||
		strings.Contains(r.stdout, "/orders") || !strings.Contains(r.stdout, "/refunds/") {
		t.Errorf("results PREFIX -limit 0: %d, asked for %q, %d\n%s", r.code, op.prefix, op.limit, r.stdout)
	}
	if r := runWith(t, nil, "results", "-limit", "1"); r.code != 0 || !strings.Contains(r.stderr, "more results than -limit 1") || strings.Count(r.stdout, "\n") != 2 {
		t.Errorf("results -limit 1: %d %q\n%s", r.code, r.stderr, r.stdout)
	}

	key := op.st[0].Key.String()
	if r := runWith(t, nil, "drop", key); r.code != 0 || !strings.HasPrefix(r.stdout, "dropped the stored result of "+key+":") {
		t.Errorf("drop: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := runWith(t, nil, "drop", key); r.code != exitNotHeld || !strings.Contains(r.stderr, "no result is stored for "+key) || r.stdout != "" {
		t.Errorf("drop again: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if len(op.st) != 1 || !slices.Equal(op.dropped, []string{key, key}) {
		t.Errorf("after the drops: %v, dropped %q", op.st, op.dropped)
	}

	before := *opened
	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"results", "a", "b"}, "results takes at most one PREFIX, not 2 operands"},
		{[]string{"results", "-limit", "-1"}, "-limit must not be negative"},
		{[]string{"results", "-reason", "x"}, "not defined: -reason"},
		{[]string{"drop"}, "drop takes one KEY, not 0 operands"},
		{[]string{"drop", "a", "b"}, "drop takes one KEY, not 2 operands"},
		{[]string{"drop", "a::b"}, "invalid key"},
		{[]string{"drop", "-limit", "5", "k"}, "not defined: -limit"},
	} {
		if r := runWith(t, nil, c.args...); r.code != exitUsage || !strings.Contains(r.stderr, c.err) {
			t.Errorf("%q: exit %d %q, want %d with %q", c.args, r.code, r.stderr, exitUsage, c.err)
		}
	}
	if *opened != before {
		t.Error("a usage error connected to Redis")
	}

	op.err = fmt.Errorf("%w: dial tcp 127.0.0.1:6379: connection refused", lockcore.ErrUnavailable)
	for _, args := range [][]string{{"results"}, {"drop", key}} {
		if r := runWith(t, nil, args...); r.code != exitError || !strings.HasPrefix(r.stderr, "routelock: Redis at 127.0.0.1:6379 is unavailable: ") || r.stdout != "" {
			t.Errorf("%q while unavailable: %d %q", args, r.code, r.stderr)
		}
	}

	// The fakeOp alone keeps no results.
	withOp(t, sampleOp())
	for _, args := range [][]string{{"results"}, {"-json", "results"}, {"drop", key}} {
		if r := runWith(t, nil, args...); r.code != exitError || !strings.Contains(r.stderr, "the engine keeps no results") || r.stdout != "" {
			t.Errorf("%q without results: %d %q %q", args, r.code, r.stderr, r.stdout)
		}
	}
}

// TestResultsJSONFormat pins the -json output of results and drop byte
// for byte against the files in testdata, as TestJSONFormat does for the
// locks: the admin handler answers the same.
func TestResultsJSONFormat(t *testing.T) {
	at := time.Date(2026, 11, 23, 14, 2, 3, 456789000, time.FixedZone("CET", 3600))
	op := sampleResults(t, at)
	withOp(t, op)
	for _, c := range []struct {
		name string
		args []string
	}{
		{"results", []string{"-json", "results"}},
		{"results-empty", []string{"-json", "results", "nothing:"}},
		{"dropped", []string{"-json", "drop", op.st[1].Key.String()}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runWith(t, nil, c.args...)
			if r.code != 0 || r.stderr != "" {
				t.Errorf("%q: %d %q", c.args, r.code, r.stderr)
			}
			file := filepath.Join("testdata", c.name+".json")
			if *update {
				if err := os.WriteFile(file, []byte(r.stdout), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if r.stdout != string(want) {
				t.Errorf("%q prints\n%s\nwant (%s)\n%s", c.args, r.stdout, file, want)
			}
		})
	}
}
