package admin_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/routelock/lock/admin"
	"github.com/routelock/lock/internal/operate"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

func TestMain(m *testing.M) { redistest.Main(m) }

const (
	user = "ops"
	pass = "s3cret-pw"
)

// mount serves h the way the package doc says to: a chi group whose
// middleware checks Basic-auth credentials, with the handler mounted at
// /admin.
func mount(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	r := chi.NewRouter()
	r.Get("/health", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	r.Group(func(r chi.Router) {
		r.Use(middleware.BasicAuth("locks", map[string]string{user: pass}))
		r.Mount("/admin", h)
	})
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv
}

type resp struct {
	code   int
	header http.Header
	body   string
}

// do sends a request with the operator's credentials; hdr holds header
// name, value pairs.
func do(t *testing.T, srv *httptest.Server, method, path, body string, hdr ...string) resp {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(user, pass)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	c := *srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp{res.StatusCode, res.Header, string(b)}
}

const jsonCT = "application/json"

var browser = []string{"Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}

func formPost(extra ...string) []string {
	return append([]string{"Content-Type", "application/x-www-form-urlencoded", "Sec-Fetch-Site", "same-origin", browser[0], browser[1]}, extra...)
}

// sample fills op with a lock held twice by one owner, with two waiters
// and an earlier force-release, and a lock held with nobody waiting.
func sample(op *memOp) {
	now := op.now
	op.set(lockcore.Info{
		Key: "productID:42",
		Holders: []lockcore.Holder{{Owner: "3f9a1c2e", Count: 2, Instances: []string{"e1a2b3c4d5e6f708"}, Names: []string{"shop-7f9c-a"},
			Route: "/products/{productID}/buy", Trace: "4bf92f3577b34da6a3ce929d0e0e4736", Since: now.Add(-1500 * time.Millisecond)}},
		Fence:     1017,
		LastFence: 1019,
		TTL:       8250 * time.Millisecond,
		Waiters: []lockcore.Waiter{
			{Instance: "9b8c7d6e5f403122", Since: now.Add(-time.Second), Deadline: now.Add(4 * time.Second)},
			{Instance: "e1a2b3c4d5e6f708", Route: "/shop.Inventory/Reserve", Trace: "0af7651916cd43dd8448eb211c80319c", Since: now.Add(-500 * time.Millisecond), Deadline: now.Add(1500 * time.Millisecond)},
		},
		Audit: []lockcore.Revocation{{Key: "productID:42", Owner: "77aa00bb", Fence: 1001, NewFence: 1002, Reason: "stuck after the 14:02 deploy", At: now.Add(-time.Hour)}},
	})
	op.set(lockcore.Info{
		Key:       "orderID:7",
		Holders:   []lockcore.Holder{{Owner: "c0ffee11", Count: 1, Instances: []string{"9b8c7d6e5f403122"}}},
		Fence:     5,
		LastFence: 5,
		TTL:       2 * time.Second,
	})
}

func keysOf(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func wantKeys(t *testing.T, what string, v any, want ...string) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s: %T, want a JSON object", what, v)
	}
	slices.Sort(want)
	if got := keysOf(m); !slices.Equal(got, want) {
		t.Errorf("%s: fields %q, want %q", what, got, want)
	}
	return m
}

func wantTime(t *testing.T, what string, v any, want time.Time) {
	t.Helper()
	s, _ := v.(string)
	got, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || !got.Equal(want) || !strings.HasSuffix(s, "Z") {
		t.Errorf("%s = %q (%v), want %v in RFC 3339 UTC", what, s, err, want.Format(time.RFC3339Nano))
	}
}

// TestJSON checks the field names and value forms of the JSON answers, on
// a generic decode: what a client in another language sees.
func TestJSON(t *testing.T) {
	op := newMemOp()
	sample(op)
	srv := mount(t, admin.Handler(op, admin.Config{}))
	now := op.now

	r := do(t, srv, "GET", "/admin/locks", "")
	if r.code != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
		t.Fatalf("GET locks: %d %s %s", r.code, r.header.Get("Content-Type"), r.body)
	}
	var list any
	if err := json.Unmarshal([]byte(r.body), &list); err != nil {
		t.Fatal(err)
	}
	l := wantKeys(t, "list", list, "locks", "more")
	if l["more"] != false {
		t.Errorf("more = %v", l["more"])
	}
	locks := l["locks"].([]any)
	if len(locks) != 2 {
		t.Fatalf("%d locks, want 2: %s", len(locks), r.body)
	}
	o := wantKeys(t, "orderID:7", locks[0], "key", "held", "holders", "fence", "last_fence", "ttl_ms", "waiters", "audit")
	if o["key"] != "orderID:7" || o["ttl_ms"] != 2000.0 || !reflect.DeepEqual(o["waiters"], []any{}) || !reflect.DeepEqual(o["audit"], []any{}) {
		t.Errorf("orderID:7 = %v (key order, durations in ms, empty lists as [])", o)
	}
	h := wantKeys(t, "holder without since", o["holders"].([]any)[0], "owner", "count", "instances", "names", "mode")
	if h["owner"] != "c0ffee11" || h["count"] != 1.0 {
		t.Errorf("holder %v", h)
	}

	p := wantKeys(t, "productID:42", locks[1], "key", "held", "holders", "fence", "last_fence", "ttl_ms", "waiters", "audit")
	if p["held"] != true || p["fence"] != 1017.0 || p["last_fence"] != 1019.0 || p["ttl_ms"] != 8250.0 {
		t.Errorf("productID:42 = %v", p)
	}
	h = wantKeys(t, "holder", p["holders"].([]any)[0], "owner", "count", "instances", "names", "route", "trace", "since", "mode")
	if h["owner"] != "3f9a1c2e" || h["count"] != 2.0 || !reflect.DeepEqual(h["instances"], []any{"e1a2b3c4d5e6f708"}) ||
		!reflect.DeepEqual(h["names"], []any{"shop-7f9c-a"}) || h["route"] != "/products/{productID}/buy" || h["trace"] != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("holder %v", h)
	}
	wantTime(t, "holder.since", h["since"], now.Add(-1500*time.Millisecond))
	ws := p["waiters"].([]any)
	if len(ws) != 2 {
		t.Fatalf("waiters %v", ws)
	}
	w := wantKeys(t, "waiter", ws[0], "instance", "since", "deadline", "mode")
	if w["instance"] != "9b8c7d6e5f403122" || ws[1].(map[string]any)["instance"] != "e1a2b3c4d5e6f708" {
		t.Errorf("waiters out of order: %v", ws)
	}
	wantTime(t, "waiter.since", w["since"], now.Add(-time.Second))
	wantTime(t, "waiter.deadline", w["deadline"], now.Add(4*time.Second))
	a := wantKeys(t, "audit", p["audit"].([]any)[0], "key", "owner", "fence", "new_fence", "reason", "at")
	if a["reason"] != "stuck after the 14:02 deploy" || a["fence"] != 1001.0 || a["new_fence"] != 1002.0 {
		t.Errorf("audit %v", a)
	}
	wantTime(t, "audit.at", a["at"], now.Add(-time.Hour))

	// One lock, and the typed form of the same answer.
	r = do(t, srv, "GET", "/admin/locks/productID:42", "")
	var one operate.Lock
	if r.code != 200 || json.Unmarshal([]byte(r.body), &one) != nil {
		t.Fatalf("GET one: %d %s", r.code, r.body)
	}
	if one.Key != "productID:42" || len(one.Waiters) != 2 || one.Holders[0].Since.Location() != time.UTC {
		t.Errorf("one = %+v", one)
	}

	// A free key is a lock nobody holds, not an error.
	r = do(t, srv, "GET", "/admin/locks/productID:43", "")
	var free any
	if r.code != 200 || json.Unmarshal([]byte(r.body), &free) != nil {
		t.Fatalf("GET free: %d %s", r.code, r.body)
	}
	f := wantKeys(t, "free", free, "key", "held", "holders", "fence", "last_fence", "ttl_ms", "waiters", "audit")
	if f["key"] != "productID:43" || f["held"] != false || !reflect.DeepEqual(f["holders"], []any{}) {
		t.Errorf("free = %v", f)
	}

	// The revocation.
	r = do(t, srv, "POST", "/admin/locks/productID:42/release", `{"reason": "  holder wedged on payments  "}`, "Content-Type", jsonCT)
	var rev any
	if r.code != 200 || json.Unmarshal([]byte(r.body), &rev) != nil {
		t.Fatalf("release: %d %s", r.code, r.body)
	}
	v := wantKeys(t, "revocation", rev, "key", "owner", "fence", "new_fence", "reason", "at")
	if v["key"] != "productID:42" || v["owner"] != "3f9a1c2e" || v["fence"] != 1017.0 || v["new_fence"] != 1020.0 || v["reason"] != "holder wedged on payments" {
		t.Errorf("revocation %v (the reason trimmed)", v)
	}
}

// TestList passes prefix and limit through, and refuses limits out of
// range.
func TestList(t *testing.T) {
	op := newMemOp()
	sample(op)
	srv := mount(t, admin.Handler(op, admin.Config{PageSize: 7}))
	r := do(t, srv, "GET", "/admin/locks?prefix=product&limit=1", "")
	if r.code != 200 || op.prefix != "product" || op.limit != 1 {
		t.Fatalf("%d %s; operator asked for %q, %d", r.code, r.body, op.prefix, op.limit)
	}
	r = do(t, srv, "GET", "/admin/locks?limit=1", "")
	var l operate.List
	if err := json.Unmarshal([]byte(r.body), &l); err != nil || !l.More || len(l.Locks) != 1 || l.Locks[0].Key != "orderID:7" {
		t.Errorf("limit 1: %s (%v)", r.body, err)
	}
	do(t, srv, "GET", "/admin/locks", "")
	if op.limit != 7 {
		t.Errorf("default limit %d, want the page size 7", op.limit)
	}
	for _, q := range []string{"limit=0", "limit=-1", "limit=1001", "limit=ten", "prefix=" + strings.Repeat("x", 5000)} {
		r := do(t, srv, "GET", "/admin/locks?"+q, "")
		var e operate.Error
		if r.code != 400 || json.Unmarshal([]byte(r.body), &e) != nil || e.Error == "" {
			t.Errorf("%s: %d %s, want 400 with an error", q, r.code, r.body)
		}
	}
}

// TestRelease covers the answers of a force-release.
func TestRelease(t *testing.T) {
	op := newMemOp()
	sample(op)
	srv := mount(t, admin.Handler(op, admin.Config{}))
	ct := []string{"Content-Type", jsonCT}
	cases := []struct {
		name, method, path, body string
		hdr                      []string
		code                     int
		errPart                  string
	}{
		{"no reason field", "POST", "/admin/locks/orderID:7/release", `{}`, ct, 400, "reason is required"},
		{"empty reason", "POST", "/admin/locks/orderID:7/release", `{"reason": " \t "}`, ct, 400, "reason is required"},
		{"reason not a string", "POST", "/admin/locks/orderID:7/release", `{"reason": 5}`, ct, 400, "reason"},
		{"control character", "POST", "/admin/locks/orderID:7/release", `{"reason": "a\u0000b"}`, ct, 400, "control"},
		{"overlong reason", "POST", "/admin/locks/orderID:7/release", `{"reason": "` + strings.Repeat("x", operate.MaxReasonLen+1) + `"}`, ct, 400, "longer"},
		{"no body", "POST", "/admin/locks/orderID:7/release", ``, nil, 400, "reason is required"},
		{"empty form", "POST", "/admin/locks/orderID:7/release", `reason=`, []string{"Content-Type", "application/x-www-form-urlencoded"}, 400, "reason is required"},
		{"reason in the query only", "POST", "/admin/locks/orderID:7/release?reason=x", `{}`, ct, 400, "reason is required"},
		{"plain text", "POST", "/admin/locks/orderID:7/release", `reason=x`, []string{"Content-Type", "text/plain"}, 415, ""},
		{"body too large", "POST", "/admin/locks/orderID:7/release", `{"reason": "` + strings.Repeat("x", 70<<10) + `"}`, ct, 413, ""},
		{"empty key part", "POST", "/admin/locks/orderID:/release", `{"reason": "x"}`, ct, 400, "invalid key"},
		{"bad escape", "POST", "/admin/locks/orderID:%25zz/release", `{"reason": "x"}`, ct, 400, "invalid key"},
		{"nine parts", "POST", "/admin/locks/a:b:c:d:e:f:g:h:i/release", `{"reason": "x"}`, ct, 400, "invalid key"},
		{"GET", "GET", "/admin/locks/orderID:7/release", ``, nil, 405, ""},
		{"DELETE of a lock", "DELETE", "/admin/locks/orderID:7", ``, nil, 405, ""},
		{"cross-site form", "POST", "/admin/locks/orderID:7/release", `reason=x`, []string{"Content-Type", "application/x-www-form-urlencoded", "Sec-Fetch-Site", "cross-site"}, 403, "cross-origin"},
		{"other origin", "POST", "/admin/locks/orderID:7/release", `reason=x`, []string{"Content-Type", "application/x-www-form-urlencoded", "Origin", "https://evil.example"}, 403, "cross-origin"},
		{"cross-site JSON", "POST", "/admin/locks/orderID:7/release", `{"reason": "x"}`, []string{"Content-Type", jsonCT, "Sec-Fetch-Site", "same-site"}, 403, "cross-origin"},
		{"free key", "POST", "/admin/locks/orderID:8/release", `{"reason": "x"}`, ct, 404, "not held"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := do(t, srv, c.method, c.path, c.body, c.hdr...)
			var e operate.Error
			if r.code != c.code || json.Unmarshal([]byte(r.body), &e) != nil || !strings.Contains(e.Error, c.errPart) {
				t.Errorf("%d %s, want %d with an error containing %q", r.code, r.body, c.code, c.errPart)
			}
			if c.code == 405 && r.header.Get("Allow") == "" {
				t.Error("405 without Allow")
			}
		})
	}
	if in, _ := op.Inspect(t.Context(), mustKey(t, "orderID:7")); len(in.Holders) == 0 {
		t.Fatal("a refused request released the lock")
	}

	// The form of the page, posted by a browser from the page's origin.
	r := do(t, srv, "POST", "/admin/locks/orderID:7/release", url.Values{"reason": {"deadlock <b>suspected</b>"}}.Encode(), formPost()...)
	if r.code != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") {
		t.Fatalf("form post: %d %s", r.code, r.body)
	}
	for _, want := range []string{"Force-released <code>orderID:7</code>", "owner <code>c0ffee11</code>", "fence 5", "now 6", "deadlock &lt;b&gt;suspected&lt;/b&gt;"} {
		if !strings.Contains(r.body, want) {
			t.Errorf("release page lacks %q:\n%s", want, r.body)
		}
	}
	if got := op.reasons[len(op.reasons)-1]; got != "deadlock <b>suspected</b>" {
		t.Errorf("reason %q", got)
	}
	// A second time it is free: 404, as a page for the browser.
	r = do(t, srv, "POST", "/admin/locks/orderID:7/release", "reason=again", formPost()...)
	if r.code != 404 || !strings.Contains(r.body, "404 Not Found: lock not held") {
		t.Errorf("second form post: %d %s", r.code, r.body)
	}
	// The same origin by Origin and Host, as browsers without
	// Sec-Fetch-Site send it, and a multipart form.
	var body strings.Builder
	body.WriteString("--b\r\nContent-Disposition: form-data; name=\"reason\"\r\n\r\nmultipart reason\r\n--b--\r\n")
	r = do(t, srv, "POST", "/admin/locks/productID:42/release", body.String(), "Content-Type", "multipart/form-data; boundary=b", "Origin", srv.URL)
	if r.code != 200 || !strings.Contains(r.body, `"reason": "multipart reason"`) {
		t.Errorf("multipart from the same origin: %d %s", r.code, r.body)
	}
}

// TestUnavailable: the backend's error text stays out of the answer and
// goes to the Logger.
func TestUnavailable(t *testing.T) {
	op := newMemOp()
	sample(op)
	var log strings.Builder
	srv := mount(t, admin.Handler(op, admin.Config{Logger: slog.New(slog.NewTextHandler(&log, nil))}))
	op.fail(fmt.Errorf("%w: dial tcp 10.1.2.3:6379: AUTH hunter2 refused", lockcore.ErrUnavailable))
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/admin/locks", ""},
		{"GET", "/admin/locks/productID:42", ""},
		{"POST", "/admin/locks/productID:42/release", `{"reason": "x"}`},
		{"GET", "/admin/", ""},
	} {
		r := do(t, srv, c.method, c.path, c.body, "Content-Type", jsonCT)
		if r.code != 503 || strings.Contains(r.body, "hunter2") || !strings.Contains(r.body, "unavailable") {
			t.Errorf("%s %s: %d %s, want 503 without the backend's error", c.method, c.path, r.code, r.body)
		}
	}
	if n := strings.Count(log.String(), "hunter2"); n != 4 {
		t.Errorf("log has the error %d times, want 4:\n%s", n, log.String())
	}
	op.fail(errors.New("something else"))
	if r := do(t, srv, "GET", "/admin/locks", ""); r.code != 500 || strings.Contains(r.body, "something") {
		t.Errorf("other error: %d %s", r.code, r.body)
	}
	op.fail(fmt.Errorf("%w: WRONGPASS", lockcore.ErrMisconfigured))
	if r := do(t, srv, "GET", "/admin/locks", ""); r.code != 500 || !strings.Contains(r.body, "misconfigured") {
		t.Errorf("misconfigured: %d %s", r.code, r.body)
	}

	op.fail(nil)
	log.Reset()
	do(t, srv, "POST", "/admin/locks/productID:42/release", `{"reason": "audit me"}`, "Content-Type", jsonCT)
	for _, want := range []string{"force-released", "resource=productID", "owner=3f9a1c2e", "fence=1017", "new_fence=1020", `reason="audit me"`, "remote=127.0.0.1:"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q: %s", want, log.String())
		}
	}
	if strings.Contains(log.String(), "productID:42") {
		t.Errorf("log shows the key's value: %s", log.String())
	}
}

// TestPage checks the HTML page: every lock with its holder, fence, TTL,
// waiters in order and audit, a release form per held lock, and the
// headers that keep it to itself.
func TestPage(t *testing.T) {
	op := newMemOp()
	sample(op)
	op.set(lockcore.Info{Key: "cartID:9", Waiters: []lockcore.Waiter{{Instance: "aaaa", Since: op.now, Deadline: op.now.Add(time.Second)}}}) // awaited, not held
	h := admin.HandlerAt(op, admin.Config{Title: "Shop locks"}, func() time.Time { return op.now })
	srv := mount(t, h)

	r := do(t, srv, "GET", "/admin/", "")
	if r.code != 200 || r.header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("%d %s", r.code, r.header)
	}
	body := r.body
	for _, want := range []string{
		"<title>Shop locks</title>",
		`<a href="./locks/productID:42"><code>productID:42</code></a>`,
		`<code title="owner digest">3f9a1c2e</code> <b title="acquisitions holding it">×2</b>`,
		"held 1.5s",
		`<div class="small nowrap" title="instance, engine id e1a2b3c4d5e6f708">on <code class="instance">shop-7f9c-a</code></div>`,
		`via <code class="route">/products/{productID}/buy</code>`, `trace <code class="trace">4bf92f3577b34da6a3ce929d0e0e4736</code>`,
		`via <code class="route">/shop.Inventory/Reserve</code>`, `trace <code class="trace">0af7651916cd43dd8448eb211c80319c</code>`,
		"<code>1017</code><div>8.25s left</div>", "last 1019",
		`2 waiting<ol><li><code class="instance" title="instance, engine id 9b8c7d6e5f403122">9b8c7d6e5f403122</code>`, "waited 1s, 4s left",
		"stuck after the 14:02 deploy",
		`<form class="release" method="post" action="./locks/productID:42/release"><input type="text" name="reason" required`,
		`action="./locks/orderID:7/release"`,
		"<code>cartID:9</code>", "1 waiting",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if i, j := strings.Index(body, "9b8c7d6e5f403122</code> <span"), strings.Index(body, "e1a2b3c4d5e6f708</code> <span"); i < 0 || j < i {
		t.Errorf("waiters not in order (%d, %d)", i, j)
	}
	if strings.Count(body, `<form class="release"`) != 2 {
		t.Errorf("want a release form for each of the 2 held locks, not for the awaited cartID:9:\n%s", body)
	}
	if strings.Contains(body, "<script") || strings.Contains(body, "http://") || strings.Contains(body, "https://") {
		t.Error("page loads or runs something")
	}
	for name, want := range map[string]string{
		"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
		"X-Frame-Options":         "DENY",
		"Cache-Control":           "no-store",
	} {
		if got := r.header.Get(name); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}

	// A browser gets the page for a lock, and for the list.
	r = do(t, srv, "GET", "/admin/locks/productID:42", "", browser...)
	if r.code != 200 || !strings.Contains(r.body, `action="../locks/productID:42/release"`) || strings.Contains(r.body, "orderID:7") {
		t.Errorf("lock page: %d %s", r.code, r.body)
	}
	r = do(t, srv, "GET", "/admin/locks?prefix=order", "", browser...)
	if r.code != 200 || !strings.Contains(r.body, "orderID:7") || strings.Contains(r.body, "productID:42") || !strings.Contains(r.body, `value="order"`) {
		t.Errorf("list page: %d %s", r.code, r.body)
	}
	// The index without its slash redirects to it.
	r = do(t, srv, "GET", "/admin?prefix=x", "")
	if r.code != 301 || r.header.Get("Location") != "./admin/?prefix=x" || mustURL(t, srv.URL+"/admin").ResolveReference(mustURL(t, "./admin/?prefix=x")).String() != srv.URL+"/admin/?prefix=x" {
		t.Errorf("/admin: %d %q", r.code, r.header.Get("Location"))
	}
	// An error page for a browser.
	r = do(t, srv, "GET", "/admin/?limit=0", "")
	if r.code != 400 || !strings.Contains(r.body, `<p class="error" role="alert">400 Bad Request: limit must be`) {
		t.Errorf("error page: %d %s", r.code, r.body)
	}
	// A page past the limit says so.
	r = do(t, srv, "GET", "/admin/?limit=1", "")
	if !strings.Contains(r.body, "Showing the first 1 locks") {
		t.Errorf("limited page: %s", r.body)
	}
	// Nothing to show.
	r = do(t, srv, "GET", "/admin/?prefix=nope:", "")
	if !strings.Contains(r.body, "No lock is held or awaited under the prefix <code>nope:</code>") {
		t.Errorf("empty page: %s", r.body)
	}
	// The page is behind the group's authentication.
	res, err := srv.Client().Get(srv.URL + "/admin/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 401 {
		t.Errorf("without credentials: %d", res.StatusCode)
	}
}

// TestEscaping: keys, reasons and ids are user data; the page shows them
// as text, and its links and forms still name them.
func TestEscaping(t *testing.T) {
	op := newMemOp()
	evil, err := lockcore.NewKey("userID", `<script>alert("x")</script>`, "a/b?c#d")
	if err != nil {
		t.Fatal(err)
	}
	op.set(lockcore.Info{
		Key:     evil.String(),
		Holders: []lockcore.Holder{{Owner: `"><img src=x>`, Count: 1, Instances: []string{"<i>inst</i>"}}},
		Fence:   1, LastFence: 1, TTL: time.Second,
		Audit: []lockcore.Revocation{{Key: evil.String(), Owner: "o", Reason: `</td><script>alert(1)</script>`, At: op.now}},
	})
	srv := mount(t, admin.Handler(op, admin.Config{Title: "<b>locks</b>"}))
	r := do(t, srv, "GET", "/admin/", "")
	if r.code != 200 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	for _, bad := range []string{"<script>", "<img", "<i>", "<b>locks"} {
		if strings.Contains(r.body, bad) {
			t.Errorf("page contains %q unescaped", bad)
		}
	}
	for _, want := range []string{
		"<code>userID:&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;:a/b?c#d</code>",
		"&lt;/td&gt;&lt;script&gt;alert(1)&lt;/script&gt;",
		"&#34;&gt;&lt;img src=x&gt;",
		"&lt;i&gt;inst&lt;/i&gt;",
	} {
		if !strings.Contains(r.body, want) {
			t.Errorf("page lacks %q:\n%s", want, r.body)
		}
	}
	// The form's action names the key, path-escaped, and posting it
	// releases that key.
	seg := url.PathEscape(evil.String())
	if !strings.Contains(r.body, `action="./locks/`+seg+`/release"`) {
		t.Fatalf("no form for %s in:\n%s", seg, r.body)
	}
	if r := do(t, srv, "GET", "/admin/locks/"+seg, ""); r.code != 200 || !strings.Contains(r.body, `"held": true`) {
		t.Errorf("GET %s: %d %s", seg, r.code, r.body)
	}
	r = do(t, srv, "POST", "/admin/locks/"+seg+"/release", "reason=x", formPost()...)
	if r.code != 200 || strings.Contains(r.body, "<script>") {
		t.Errorf("release: %d %s", r.code, r.body)
	}
}

// TestMounts: the handler works wherever it is mounted, with the same
// links in its page.
func TestMounts(t *testing.T) {
	keys := []string{"productID:42", "locks", "release", "a:release", "..", "sku:a%2Fb", "p:x y"}
	cases := []struct {
		name  string
		mount func(h http.Handler) http.Handler
		root  string
		// bare is what the root without its slash answers: a redirect to
		// the root, or nothing of the handler's (the router does not route
		// it there).
		bare string
	}{
		{"chi Mount", func(h http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Mount("/ops/admin", h)
			return r
		}, "/ops/admin/", "redirect"},
		{"chi Mount in a mounted router", func(h http.Handler) http.Handler {
			inner := chi.NewRouter()
			inner.Mount("/admin", h)
			r := chi.NewRouter()
			r.Mount("/ops", inner)
			return r
		}, "/ops/admin/", "redirect"},
		{"chi Mount on /locks", func(h http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Mount("/debug/locks", h)
			return r
		}, "/debug/locks/", "redirect"},
		{"StripPrefix", func(h http.Handler) http.Handler {
			m := http.NewServeMux()
			m.Handle("/ops/admin/", http.StripPrefix("/ops/admin", h))
			return m
		}, "/ops/admin/", "redirect"},
		{"StripPrefix with the slash", func(h http.Handler) http.Handler {
			m := http.NewServeMux()
			m.Handle("/ops/admin/", http.StripPrefix("/ops/admin/", h))
			return m
		}, "/ops/admin/", "redirect"},
		{"StripPrefix of the path without its slash", func(h http.Handler) http.Handler {
			m := http.NewServeMux()
			m.Handle("/ops/admin", http.StripPrefix("/ops/admin", h))
			m.Handle("/ops/admin/", http.StripPrefix("/ops/admin", h))
			return m
		}, "/ops/admin/", "redirect"},
		{"behind a proxy that strips a prefix", func(h http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Mount("/admin", h)
			return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				// What the application sees of /ops/admin/... from the proxy.
				req.URL.Path = strings.TrimPrefix(req.URL.Path, "/ops")
				req.URL.RawPath = strings.TrimPrefix(req.URL.RawPath, "/ops")
				req.RequestURI = strings.TrimPrefix(req.RequestURI, "/ops")
				r.ServeHTTP(w, req)
			})
		}, "/ops/admin/", "redirect"},
		{"ServeMux subtree", func(h http.Handler) http.Handler {
			m := http.NewServeMux()
			m.Handle("/ops/admin/", h)
			return m
		}, "/ops/admin/", "redirect"},
		{"chi Handle", func(h http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Handle("/ops/admin/*", h)
			return r
		}, "/ops/admin/", "none"},
		{"chi Handle with StripPrefix", func(h http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Handle("/ops/admin/*", http.StripPrefix("/ops/admin", h))
			return r
		}, "/ops/admin/", "none"},
		{"root", func(h http.Handler) http.Handler { return h }, "/", "none"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			op := newMemOp()
			for i, k := range keys {
				op.set(lockcore.Info{Key: mustKey(t, k).String(), Holders: []lockcore.Holder{{Owner: fmt.Sprintf("own%d", i), Count: 1}}, Fence: int64(i + 1), LastFence: int64(i + 1), TTL: time.Second})
			}
			srv := httptest.NewServer(c.mount(admin.Handler(op, admin.Config{})))
			defer srv.Close()
			get := func(path string, hdr ...string) resp {
				t.Helper()
				return do(t, srv, "GET", path, "", hdr...)
			}
			if r := get(c.root); r.code != 200 || !strings.Contains(r.body, `action="./locks/productID:42/release"`) {
				t.Fatalf("GET %s: %d %s", c.root, r.code, r.body)
			}
			switch bare := strings.TrimSuffix(c.root, "/"); c.bare {
			case "redirect":
				r := get(bare)
				loc, err := url.Parse(r.header.Get("Location"))
				if r.code/100 != 3 || err != nil || mustURL(t, srv.URL+bare).ResolveReference(loc).Path != c.root {
					t.Errorf("GET %s: %d to %q, want a redirect to %s", bare, r.code, r.header.Get("Location"), c.root)
				}
			case "list":
				if r := get(bare); r.code != 200 || !strings.Contains(r.body, `"locks": [`) {
					t.Errorf("GET %s: %d %s", bare, r.code, r.body)
				}
			}
			var l operate.List
			if r := get(c.root + "locks"); r.code != 200 || json.Unmarshal([]byte(r.body), &l) != nil || len(l.Locks) != len(keys) {
				t.Fatalf("GET locks: %d %s", r.code, r.body)
			}
			page := get(c.root)
			pageURL := mustURL(t, srv.URL+c.root)
			for i, k := range keys {
				key := mustKey(t, k).String()
				// The page's link to the key, as a browser follows it: the
				// documented path of the key.
				link := find(t, page.body, `<a href="([^"]*)"><code>`+regexp.QuoteMeta(html.EscapeString(key))+`</code></a>`)
				if link == "" {
					continue
				}
				u := pageURL.ResolveReference(mustURL(t, link))
				if want := c.root + "locks/" + keySegmentOf(key); u.EscapedPath() != want {
					t.Errorf("%q: link %q goes to %s, want %s", key, link, u.EscapedPath(), want)
				}
				var one operate.Lock
				if r := get(u.RequestURI()); r.code != 200 || json.Unmarshal([]byte(r.body), &one) != nil || one.Key != key || one.Fence != int64(i+1) {
					t.Errorf("GET %s: %d %s", u.RequestURI(), r.code, r.body)
				}
				// The key's page, and its release form, posted.
				lockPage := get(u.RequestURI(), browser...)
				action := find(t, lockPage.body, `<form class="release" method="post" action="([^"]*)"`)
				if action == "" {
					continue
				}
				post := u.ResolveReference(mustURL(t, action))
				r := do(t, srv, "POST", post.RequestURI(), "reason=r", formPost()...)
				if r.code != 200 || !strings.Contains(r.body, "Force-released <code>"+html.EscapeString(key)+"</code>, held by owner <code>"+fmt.Sprintf("own%d", i)) {
					t.Errorf("POST %s: %d %s", post.RequestURI(), r.code, r.body)
				}
				// The release page's links lead back.
				back := post.ResolveReference(mustURL(t, find(t, r.body, `<a href="([^"]*)">all locks</a>`)))
				if back.EscapedPath() != c.root {
					t.Errorf("all locks from %s: %s", post.EscapedPath(), back.EscapedPath())
				}
			}
			// And the JSON release, on the documented path.
			if r := do(t, srv, "POST", c.root+"locks/productID:42/release", `{"reason": "r"}`, "Content-Type", jsonCT); r.code != 404 {
				t.Errorf("second release: %d %s", r.code, r.body)
			}
		})
	}
}

// find returns the first submatch of pattern in s, unescaped as an HTML
// attribute.
func find(t *testing.T, s, pattern string) string {
	t.Helper()
	m := regexp.MustCompile(pattern).FindStringSubmatch(s)
	if m == nil {
		t.Errorf("no %s in:\n%s", pattern, s)
		return ""
	}
	return html.UnescapeString(m[1])
}

// keySegmentOf is how the page writes a key into a path.
func keySegmentOf(key string) string {
	s := url.PathEscape(key)
	switch s {
	case "locks", "release", ".", "..":
		return fmt.Sprintf("%%%02X", s[0]) + s[1:]
	}
	return s
}

func mustKey(t testing.TB, s string) lockcore.Key {
	t.Helper()
	var parts []string
	for p := range strings.SplitSeq(s, ":") {
		u, err := url.PathUnescape(p)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, u)
	}
	k, err := lockcore.NewKey(parts...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestHandlerPanics: an invalid Config is refused when the handler is
// built, not at the first request.
func TestHandlerPanics(t *testing.T) {
	for _, c := range []struct {
		name, want string
		f          func()
	}{
		{"nil", "routelock: admin.Handler(nil)", func() { admin.Handler(nil, admin.Config{}) }},
		{"negative page size", "routelock: admin.PageSize(-1) is out of range 1..1000", func() { admin.Handler(newMemOp(), admin.Config{PageSize: -1}) }},
		{"page size", "routelock: admin.PageSize(1001) is out of range 1..1000", func() { admin.Handler(newMemOp(), admin.Config{PageSize: 1001}) }},
		{"origin", "routelock: admin.TrustedOrigin: ", func() {
			admin.Handler(newMemOp(), admin.Config{TrustedOrigins: []string{"https://ops.example.com", "not an origin"}})
		}},
	} {
		func() {
			defer func() {
				got := fmt.Sprint(recover())
				if !strings.HasPrefix(got, c.want) {
					t.Errorf("%s: panic %q, want %q", c.name, got, c.want)
				}
			}()
			c.f()
		}()
	}
	admin.Handler(newMemOp(), admin.Config{PageSize: 1000, TrustedOrigins: []string{"https://ops.example.com", "http://localhost:8080"}})
}

// TestConfig: the zero Config titles the page "Locks" and lists 100 locks,
// PageSize 1 lists one, and TrustedOrigins lets a browser post the release
// form from those origins only.
func TestConfig(t *testing.T) {
	op := newMemOp()
	sample(op)
	srv := mount(t, admin.Handler(op, admin.Config{}))
	if r := do(t, srv, "GET", "/admin/", ""); r.code != 200 || !strings.Contains(r.body, "<title>Locks</title>") || op.limit != 100 {
		t.Errorf("zero Config: %d, operator asked for %d locks:\n%s", r.code, op.limit, r.body)
	}
	srv = mount(t, admin.Handler(op, admin.Config{PageSize: 1}))
	if r := do(t, srv, "GET", "/admin/locks", ""); r.code != 200 || op.limit != 1 || !strings.Contains(r.body, `"more": true`) {
		t.Errorf("PageSize 1: %d, operator asked for %d locks: %s", r.code, op.limit, r.body)
	}

	srv = mount(t, admin.Handler(op, admin.Config{TrustedOrigins: []string{"https://ops.example.com"}}))
	post := func(origin string) resp {
		return do(t, srv, "POST", "/admin/locks/orderID:7/release", "reason=from+the+ops+site",
			"Content-Type", "application/x-www-form-urlencoded", "Sec-Fetch-Site", "cross-site", "Origin", origin)
	}
	if r := post("https://evil.example"); r.code != 403 {
		t.Errorf("post from another origin: %d %s", r.code, r.body)
	}
	if in, _ := op.Inspect(t.Context(), mustKey(t, "orderID:7")); len(in.Holders) == 0 {
		t.Fatal("a refused post released the lock")
	}
	if r := post("https://ops.example.com"); r.code != 200 || !strings.Contains(r.body, `"reason": "from the ops site"`) {
		t.Errorf("post from a trusted origin: %d %s", r.code, r.body)
	}
}
