package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/routelock/lock/admin"
	"github.com/routelock/lock/internal/idem"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/operate"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
)

// stored is a result stored for a test, by the client's idempotency key.
type stored struct {
	key    lockcore.Key
	client string // the client's idempotency key, which no answer may show
	body   string // the response's body, which no answer may show
	keep   time.Duration
}

// storeResults stores, in e, a result for each of three idempotency keys
// (two of POST /orders without a caller, one of POST /refunds/{id} with a
// caller), as the idempotency middleware does: by the lookup key of
// idem.LockKey, through a lease of the key, kept for keep.
func storeResults(t *testing.T, e lockcore.Engine) []stored {
	t.Helper()
	ss := []stored{
		{client: "client-key-a9f3e1", body: "body-secret-1", keep: time.Hour},
		{client: "client-key-77b0c2", body: "body-secret-2", keep: 2 * time.Hour},
		{client: "client-key-0d4e55", body: "body-secret-3", keep: 30 * time.Minute},
	}
	ops := [][]string{{"POST", "/orders"}, {"POST", "/orders"}, {"POST", "/refunds/{id}"}}
	callers := []string{"", "", "tenant-7"}
	ctx := t.Context()
	for i := range ss {
		k, err := idem.LockKey(ops[i], callers[i], ss[i].client)
		if err != nil {
			t.Fatal(err)
		}
		ss[i].key = k
		lease, err := lifecycle.Serve(e, nil).Acquire(ctx, k, lifecycle.Policy{Wait: lockcore.FailFast, TTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		rec := idem.Record{Status: 201, Fields: [][2]string{{"Content-Type", "text/plain"}}, Body: []byte(ss[i].body)}
		if err := lifecycle.Keep(ctx, lease, rec.Encode(), ss[i].keep); err != nil {
			t.Fatal(err)
		}
	}
	return ss
}

// noSecrets fails the test when an answer shows a client's idempotency
// key or a stored body.
func noSecrets(t *testing.T, what, body string, ss []stored) {
	t.Helper()
	for _, s := range ss {
		if strings.Contains(body, s.client) || strings.Contains(body, s.body) {
			t.Fatalf("%s shows a client's key or a stored body:\n%s", what, body)
		}
	}
}

// TestResults: on Redis, the JSON (GET .../results) lists the stored
// results by lookup key, in key order, with their size and expiry, under a
// prefix and a limit as the locks' list takes them; the page shows them
// with a Drop button each, and the index links them; POST
// .../results/{key}/drop drops one (JSON and the page's form), which the
// engine then no longer has, and a second drop of it is 404; GET there is
// 405, a cross-site POST 403 and drops nothing. No answer shows a client's
// idempotency key or a stored body.
func TestResults(t *testing.T) {
	redistest.RunDeployments(t, func(t *testing.T, b *redistest.Backend) {
		prefix := redistest.Prefix(t)
		newEngine := func() *redisengine.Engine {
			rdb := b.Universal(t)
			e, err := redisengine.New(rdb, redisengine.Options{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			return e
		}
		app, ops := newEngine(), newEngine()
		ss := storeResults(t, app)
		var logs bytes.Buffer
		srv := mount(t, admin.Handler(ops, admin.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}))
		ctx := t.Context()

		engineSaw, _, err := ops.StoredResults(ctx, "", 10)
		if err != nil || len(engineSaw) != 3 {
			t.Fatalf("the engine's own listing: %v %+v", err, engineSaw)
		}
		before := time.Now()
		var l operate.Results
		r := do(t, srv, "GET", "/admin/results", "")
		if r.code != 200 || json.Unmarshal([]byte(r.body), &l) != nil {
			t.Fatalf("GET results: %d %s", r.code, r.body)
		}
		noSecrets(t, "GET results", r.body, ss)
		if len(l.Results) != 3 || l.More {
			t.Fatalf("results %+v, want 3, no more", l)
		}
		byKey := map[string]stored{}
		for _, s := range ss {
			byKey[s.key.String()] = s
		}
		for i, res := range l.Results {
			s, ok := byKey[res.Key]
			if !ok {
				t.Fatalf("result %d: key %q is none of the stored ones", i, res.Key)
			}
			if i > 0 && res.Key <= l.Results[i-1].Key {
				t.Errorf("results not in key order: %q after %q", res.Key, l.Results[i-1].Key)
			}
			if res.Size != engineSaw[i].Size || res.Size < int64(len(s.body)) {
				t.Errorf("%s: size %d, the engine says %d, the body alone is %d", res.Key, res.Size, engineSaw[i].Size, len(s.body))
			}
			if left := res.Expires.Sub(before); left > s.keep+time.Second || left < s.keep-time.Minute {
				t.Errorf("%s: expires in %v, kept for %v", res.Key, left, s.keep)
			}
			if res.Expires.Location() != time.UTC {
				t.Errorf("%s: expires %v, not in UTC", res.Key, res.Expires)
			}
		}

		// A prefix, as the locks' list takes one: the escaped key's
		// beginning.
		orders := ss[0].key.String()
		orders = orders[:strings.Index(orders, ":~:")+1] // idempotency:POST:/orders:
		r = do(t, srv, "GET", "/admin/results?prefix="+orders, "")
		l = operate.Results{}
		if r.code != 200 || json.Unmarshal([]byte(r.body), &l) != nil || len(l.Results) != 2 || l.More ||
			!strings.HasPrefix(l.Results[0].Key, orders) || !strings.HasPrefix(l.Results[1].Key, orders) {
			t.Fatalf("GET results?prefix=%s: %d %s", orders, r.code, r.body)
		}
		r = do(t, srv, "GET", "/admin/results?limit=1", "")
		l = operate.Results{}
		if r.code != 200 || json.Unmarshal([]byte(r.body), &l) != nil || len(l.Results) != 1 || !l.More {
			t.Fatalf("GET results?limit=1: %d %s", r.code, r.body)
		}
		for _, q := range []string{"limit=0", "limit=1001", "limit=x", "prefix=" + strings.Repeat("x", 4097)} {
			if r := do(t, srv, "GET", "/admin/results?"+q, ""); r.code != 400 {
				t.Errorf("GET results?%.20s: %d %s", q, r.code, r.body)
			}
		}

		// The page: each result with its Drop form, the index linking it.
		page := do(t, srv, "GET", "/admin/results", "", browser...)
		if page.code != 200 || !strings.Contains(page.body, "<h2>Stored results</h2>") {
			t.Fatalf("results page: %d %s", page.code, page.body)
		}
		for _, s := range ss {
			for _, want := range []string{"<code>" + s.key.String() + "</code>", `action="./results/` + keySegmentOf(s.key.String()) + `/drop"`} {
				if !strings.Contains(page.body, want) {
					t.Errorf("the results page lacks %q:\n%s", want, page.body)
				}
			}
		}
		noSecrets(t, "the results page", page.body, ss)
		if !strings.Contains(page.body, " left</span>") || !strings.Contains(page.body, "3 stored results") {
			t.Errorf("the results page shows no expiry or count:\n%s", page.body)
		}
		if p := do(t, srv, "GET", "/admin/results?prefix="+orders+"&limit=1", "", browser...); p.code != 200 ||
			!strings.Contains(p.body, "Showing the first 1 results") || strings.Contains(p.body, "/refunds/") ||
			!strings.Contains(p.body, `action="./results"`) || !strings.Contains(p.body, `name="prefix" value="`+orders+`"`) {
			t.Errorf("results page under a prefix and a limit: %d %s", p.code, p.body)
		}
		index := do(t, srv, "GET", "/admin/", "", browser...)
		if !strings.Contains(index.body, `<a href="./results">stored results</a>`) || !strings.Contains(index.body, `<a href="./results">results</a>`) {
			t.Errorf("the index does not link the stored results:\n%s", index.body)
		}

		// Dropping: POST only, same-origin only.
		drop := "/admin/results/" + keySegmentOf(ss[0].key.String()) + "/drop"
		if r := do(t, srv, "GET", drop, ""); r.code != 405 || r.header.Get("Allow") != "POST" {
			t.Errorf("GET of a drop: %d %s", r.code, r.body)
		}
		if r := do(t, srv, "POST", drop, "", "Content-Type", jsonCT, "Sec-Fetch-Site", "cross-site"); r.code != 403 {
			t.Errorf("a cross-site drop: %d %s", r.code, r.body)
		}
		if _, ok, err := ops.Result(ctx, ss[0].key); err != nil || !ok {
			t.Fatalf("after a refused drop the result is gone: %v %v", ok, err)
		}
		r = do(t, srv, "POST", drop, "", "Content-Type", jsonCT)
		var d operate.Dropped
		if r.code != 200 || json.Unmarshal([]byte(r.body), &d) != nil || d.Dropped != ss[0].key.String() {
			t.Fatalf("drop: %d %s", r.code, r.body)
		}
		if _, ok, err := ops.Result(ctx, ss[0].key); err != nil || ok {
			t.Fatalf("after the drop the engine still has the result: %v %v", ok, err)
		}
		if _, ok, err := app.Result(ctx, ss[1].key); err != nil || !ok {
			t.Fatalf("the drop of one result dropped another: %v %v", ok, err)
		}
		if r := do(t, srv, "POST", drop, "", "Content-Type", jsonCT); r.code != 404 || !strings.Contains(r.body, `"error": "no result stored"`) {
			t.Errorf("a second drop: %d %s", r.code, r.body)
		}

		// From the page's form.
		drop = "/admin/results/" + keySegmentOf(ss[2].key.String()) + "/drop"
		r = do(t, srv, "POST", drop, "", formPost()...)
		if r.code != 200 || !strings.Contains(r.body, "Dropped the stored result of <code>"+ss[2].key.String()+"</code>") ||
			strings.Contains(r.body, "<code>"+ss[2].key.String()+"</code></td>") || !strings.Contains(r.body, "<code>"+ss[1].key.String()+"</code></td>") {
			t.Fatalf("drop from the form: %d %s", r.code, r.body)
		}
		noSecrets(t, "the drop's page", r.body, ss)
		if _, ok, err := ops.Result(ctx, ss[2].key); err != nil || ok {
			t.Fatalf("after the form's drop the engine still has the result: %v %v", ok, err)
		}
		l = operate.Results{}
		if r := do(t, srv, "GET", "/admin/results", ""); json.Unmarshal([]byte(r.body), &l) != nil || len(l.Results) != 1 || l.Results[0].Key != ss[1].key.String() {
			t.Fatalf("after two drops: %d %s", r.code, r.body)
		}

		// The log names the resource, not the lookup key's values.
		out := logs.String()
		if strings.Count(out, "admin: stored result dropped") != 2 || !strings.Contains(out, "resource=idempotency") {
			t.Errorf("log:\n%s", out)
		}
		for _, s := range ss {
			if strings.Contains(out, s.key.String()[len("idempotency:"):]) {
				t.Errorf("the log shows a lookup key's values:\n%s", out)
			}
		}
		noSecrets(t, "the log", out, ss)
	})
}

// TestNoResults: over an engine that keeps no results, the page has no
// stored results (no link to them), GET .../results is 501, and a drop is
// 501 and drops nothing: the Operator hides the Redis engine's results.
func TestNoResults(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		e, err := redisengine.New(b.Client(t), redisengine.Options{Prefix: redistest.Prefix(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		ss := storeResults(t, e)
		srv := mount(t, admin.Handler(struct{ lockcore.Operator }{e}, admin.Config{}))

		index := do(t, srv, "GET", "/admin/", "", browser...)
		if index.code != 200 || strings.Contains(index.body, "results") {
			t.Errorf("the index of an engine without results: %d\n%s", index.code, index.body)
		}
		if r := do(t, srv, "GET", "/admin/results", ""); r.code != 501 || !strings.Contains(r.body, "keeps no results") {
			t.Errorf("GET results: %d %s", r.code, r.body)
		}
		if r := do(t, srv, "GET", "/admin/results", "", browser...); r.code != 501 || !strings.Contains(r.body, "keeps no results") {
			t.Errorf("GET results, page: %d %s", r.code, r.body)
		}
		if r := do(t, srv, "POST", "/admin/results/"+keySegmentOf(ss[0].key.String())+"/drop", "", "Content-Type", jsonCT); r.code != 501 {
			t.Errorf("drop: %d %s", r.code, r.body)
		}
		if _, ok, err := e.Result(context.Background(), ss[0].key); err != nil || !ok {
			t.Fatalf("a refused drop dropped the result: %v %v", ok, err)
		}
	})
}
