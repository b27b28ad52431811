package lock_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore/redisengine"
	"github.com/routelock/lock/middleware"
)

// fencedStore is the application's store: it takes a write only with a
// fencing token at least the last one it took for the key, and counts the
// writes of each key.
type fencedStore struct {
	mu     sync.Mutex
	fence  map[string]int64
	writes map[string]int
	last   map[string]time.Time // when the last write was taken
}

func newFencedStore() *fencedStore {
	return &fencedStore{fence: map[string]int64{}, writes: map[string]int{}, last: map[string]time.Time{}}
}

func (s *fencedStore) write(key string, fence int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence < s.fence[key] {
		return fmt.Errorf("fence %d below %d", fence, s.fence[key])
	}
	s.fence[key] = fence
	s.writes[key]++
	s.last[key] = time.Now()
	return nil
}

// payments is an app instance: a chi router whose POST /payments/{account}
// is idempotent, on its own client of the Redis at addr. Its handler takes
// 5 to 50 ms, writes through store, and answers with an id of its own, so
// that a replay is told from a second run by its body.
func payments(t *testing.T, rdb redis.UniversalClient, prefix string, store *fencedStore, c middleware.IdempotencyConfig) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(paymentsRouter(t, paymentsLocker(t, rdb, prefix), store, c))
	t.Cleanup(srv.Close)
	return srv
}

// paymentsLocker is the Locker of an app instance of payments.
func paymentsLocker(t *testing.T, rdb redis.UniversalClient, prefix string) *lock.Locker {
	t.Helper()
	o := redisengine.Options{Prefix: prefix}
	if raceDetector {
		// A thousand requests at once through a client the race detector
		// slows several times over outlast the default 1 s that a call
		// may wait for its answer (503): a limit for production speeds.
		o.Timeout = 10 * time.Second
	}
	l := lock.NewRedis(rdb, o)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// paymentsOn is payments on the Locker l.
func paymentsOn(t *testing.T, l *lock.Locker, store *fencedStore, c middleware.IdempotencyConfig) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(paymentsRouter(t, l, store, c))
	t.Cleanup(srv.Close)
	return srv
}

// paymentsRouter is the router of payments, on the Locker l.
func paymentsRouter(t *testing.T, l *lock.Locker, store *fencedStore, c middleware.IdempotencyConfig) *chi.Mux {
	t.Helper()
	if c.Policy.Wait == 0 {
		c.Policy = lock.Wait(20 * time.Second)
	}
	r := chi.NewRouter()
	r.With(middleware.Idempotency(l, c)).Post("/payments/{account}", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n, _ := rand.Int(rand.Reader, big.NewInt(45))
		select {
		case <-time.After(5*time.Millisecond + time.Duration(n.Int64())*time.Millisecond):
		case <-r.Context().Done():
		}
		fence, _ := lock.FencingToken(r.Context())
		if err := store.write(r.Header.Get("Idempotency-Key"), fence); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		var id [8]byte
		_, _ = rand.Read(id[:])
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/payments/"+hex.EncodeToString(id[:]))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%q,"account":%q,"amount":%q}`, hex.EncodeToString(id[:]), chi.URLParam(r, "account"), body)
	})
	return r
}

type answer struct {
	status   int
	body     []byte
	replayed bool
	location string
	retry    string // Retry-After
}

func idemPost(t *testing.T, c *http.Client, url, key, body string, h ...string) answer {
	t.Helper()
	a, err := idemTry(c, url, key, body, h...)
	if err != nil {
		t.Error(err)
	}
	return a
}

// idemTry is idemPost, which returns the request's error instead.
func idemTry(c *http.Client, url, key, body string, h ...string) (answer, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(h); i += 2 {
		req.Header.Set(h[i], h[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, b, resp.Header.Get("Idempotent-Replayed") == "true", resp.Header.Get("Location"), resp.Header.Get("Retry-After")}, err
}

// TestIdempotencyRunsOnceAcrossInstances: 100 keys, each sent 10 times at
// once, spread over 3 app instances on one Redis: each key's handler ran
// once, as the fenced store counts, and every duplicate got the first
// response byte for byte, marked as a replay.
func TestIdempotencyRunsOnceAcrossInstances(t *testing.T) {
	idemBurst(t, redistest.Best(t))
}

// idemKeys and idemDups are idemBurst's keys, and how often each is sent.
const idemKeys, idemDups = 100, 10

// timedAnswer is an answer and when its request was sent and answered.
type timedAnswer struct {
	answer
	sent, done time.Time
}

// idemBurst sends idemKeys keys idemDups times each, all at once, spread
// over 3 app instances on b, and checks that each key's handler ran once
// and every duplicate got the first response replayed. It returns the
// answers, by key, and the store.
func idemBurst(t *testing.T, b *redistest.Backend) ([][idemDups]timedAnswer, *fencedStore) {
	t.Helper()
	prefix := redistest.Prefix(t)
	store := newFencedStore()
	// 100 keys on a real server; on miniredis, whose scripts run in an
	// interpreter of Go, 30, so that the embedded fallback stays quick.
	keys := idemKeys
	if !b.Real() {
		keys = 30
	}
	n := keys * idemDups
	// Each request goes out on a connection opened before, as from clients
	// that keep their connections alive: opening a thousand at once on
	// loopback, on two cores, delays their requests' arrival by 40 to 220
	// ms, a cost of the test's client that would swamp the latencies the
	// burst is to show. GET /warm answers once n requests are in, so that
	// each of them has a connection of its own.
	var in atomic.Int64
	allIn := make(chan struct{})
	warm := func(w http.ResponseWriter, r *http.Request) {
		if in.Add(1) == int64(n) {
			close(allIn)
		}
		select {
		case <-allIn:
		case <-time.After(30 * time.Second):
		}
		w.WriteHeader(http.StatusNoContent)
	}
	var logs syncBuffer // what the instances say of responses not stored
	var apps []*httptest.Server
	for range 3 {
		r := paymentsRouter(t, paymentsLocker(t, b.Universal(t), prefix), store, middleware.IdempotencyConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		r.Get("/warm", warm)
		srv := httptest.NewServer(r)
		t.Cleanup(srv.Close)
		apps = append(apps, srv)
	}
	defer func() {
		if t.Failed() && logs.String() != "" {
			t.Logf("the instances logged:\n%s", logs.String())
		}
	}()
	tr := &http.Transport{MaxIdleConnsPerHost: n}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 60 * time.Second}
	var wg sync.WaitGroup
	for k := range keys {
		for d := range idemDups {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := client.Get(apps[(k+d)%len(apps)].URL + "/warm")
				if err != nil {
					t.Error(err)
					return
				}
				_ = resp.Body.Close()
			}()
		}
	}
	wg.Wait()
	if got := in.Load(); got != int64(n) {
		t.Fatalf("%d of %d connections opened before the burst", got, n)
	}
	answers := make([][idemDups]timedAnswer, keys)
	for k := range keys {
		for d := range idemDups {
			wg.Add(1)
			go func() {
				defer wg.Done()
				app := apps[(k+d)%len(apps)]
				sent := time.Now()
				a := idemPost(t, client, app.URL+"/payments/acct-"+fmt.Sprint(k%7), fmt.Sprintf("key-%d", k), fmt.Sprintf("amount=%d", k))
				answers[k][d] = timedAnswer{a, sent, time.Now()}
			}()
		}
	}
	wg.Wait()
	for k := range keys {
		if n := store.writes[fmt.Sprintf("key-%d", k)]; n != 1 {
			t.Errorf("key-%d: the handler wrote %d times, want once", k, n)
		}
		fresh := 0
		for d, a := range answers[k] {
			if a.status != http.StatusCreated {
				t.Errorf("key-%d, request %d: %d %s, want 201", k, d, a.status, a.body)
				continue
			}
			if !a.replayed {
				fresh++
			}
			if !bytes.Equal(a.body, answers[k][0].body) || a.location != answers[k][0].location {
				t.Errorf("key-%d, request %d: %s (Location %s), want %s (Location %s) as the first", k, d, a.body, a.location, answers[k][0].body, answers[k][0].location)
			}
		}
		if fresh != 1 {
			t.Errorf("key-%d: %d responses without the replay mark, want 1", k, fresh)
		}
	}
	return answers, store
}

// problemOf decodes an application/problem+json body.
func problemOf(t *testing.T, a answer) (typ string) {
	t.Helper()
	var p struct {
		Type   string
		Status int
	}
	if err := json.Unmarshal(a.body, &p); err != nil || p.Status != a.status {
		t.Fatalf("%d %q: not a problem of its status (%v)", a.status, a.body, err)
	}
	return p.Type
}

// TestIdempotencyMisuse: keys scoped by caller, a key reused with another
// payload, a missing or malformed key, and a response too large to store;
// no refusal echoes the key.
func TestIdempotencyMisuse(t *testing.T) {
	b := redistest.Best(t)
	store := newFencedStore()
	caller := func(r *http.Request) (string, error) {
		if u := r.Header.Get("X-User"); u != "" {
			return u, nil
		}
		return "", fmt.Errorf("no user")
	}
	app := payments(t, b.Universal(t), redistest.Prefix(t), store, middleware.IdempotencyConfig{Caller: caller})
	c := app.Client()
	url := app.URL + "/payments/a1"
	const secret = "k-5f1d9a77"

	ann := idemPost(t, c, url, secret, "amount=5", "X-User", "ann")
	bob := idemPost(t, c, url, secret, "amount=5", "X-User", "bob")
	if ann.status != http.StatusCreated || bob.status != http.StatusCreated || ann.replayed || bob.replayed || bytes.Equal(ann.body, bob.body) {
		t.Fatalf("one key, two callers: %d %s and %d %s; want two fresh 201s of their own", ann.status, ann.body, bob.status, bob.body)
	}
	if n := store.writes[secret]; n != 2 {
		t.Errorf("one key, two callers: %d writes, want 2", n)
	}
	again := idemPost(t, c, url, secret, "amount=5", "X-User", "ann")
	if !again.replayed || !bytes.Equal(again.body, ann.body) {
		t.Errorf("ann's retry: %d %s (replayed %v), want her first response replayed", again.status, again.body, again.replayed)
	}
	for _, tc := range []struct {
		name, key, body, user string
		status                int
		kind                  string
	}{
		{"another payload", secret, "amount=500", "ann", http.StatusUnprocessableEntity, "#key-reused"},
		{"another path", secret, "amount=5", "ann", http.StatusUnprocessableEntity, "#key-reused"},
		{"no key", "", "amount=5", "ann", http.StatusBadRequest, "#missing-key"},
		{"malformed key", `"` + secret, "amount=5", "ann", http.StatusBadRequest, "#malformed-key"},
		{"key too long", strings.Repeat("k", 256), "amount=5", "ann", http.StatusBadRequest, "#malformed-key"},
		{"no caller", secret, "amount=5", "", http.StatusUnauthorized, "#caller"},
	} {
		u := url
		if tc.name == "another path" {
			u = app.URL + "/payments/a2"
		}
		var h []string
		if tc.user != "" {
			h = []string{"X-User", tc.user}
		}
		a := idemPost(t, c, u, tc.key, tc.body, h...)
		if a.status != tc.status || !strings.HasSuffix(problemOf(t, a), tc.kind) {
			t.Errorf("%s: %d %s, want %d %s", tc.name, a.status, a.body, tc.status, tc.kind)
		}
		if strings.Contains(string(a.body), secret) || strings.Contains(string(a.body), "kkkk") {
			t.Errorf("%s: the refusal echoes the key: %s", tc.name, a.body)
		}
	}
	if n := store.writes[secret]; n != 2 {
		t.Errorf("after the refusals: %d writes, want still 2", n)
	}
	// "another path" scoped to /payments/{account}: the same route, so the
	// same key; the payload (the path) differs.
}

// TestIdempotencyLargeResponseNotStored: a 10 MiB response goes out whole,
// is not stored, and its retry is answered 410 without a second run.
func TestIdempotencyLargeResponseNotStored(t *testing.T) {
	b := redistest.Best(t)
	l := lock.NewRedis(b.Universal(t), redisengine.Options{Prefix: redistest.Prefix(t)})
	defer l.Close()
	big := bytes.Repeat([]byte("0123456789abcdef"), 10<<20/16)
	runs := 0
	r := chi.NewRouter()
	r.With(l.Idempotent()).Post("/export", func(w http.ResponseWriter, r *http.Request) {
		runs++
		_, _ = w.Write(big[:1000])
		_, _ = w.Write(big[1000:])
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	first := idemPost(t, srv.Client(), srv.URL+"/export", "big-1", "")
	if first.status != http.StatusOK || !bytes.Equal(first.body, big) {
		t.Fatalf("a 10 MiB response: %d, %d bytes; want 200 and every byte", first.status, len(first.body))
	}
	retry := idemPost(t, srv.Client(), srv.URL+"/export", "big-1", "")
	if retry.status != http.StatusGone || !strings.HasSuffix(problemOf(t, retry), "#not-stored") || runs != 1 {
		t.Errorf("its retry: %d %s after %d runs; want 410 #not-stored after 1", retry.status, retry.body, runs)
	}
}

// TestIdempotencyLostLeaseStoresNothing: a handler whose lock's key is gone
// from Redis when it returns (its lease ran out there) stores nothing, so
// the retry runs; with the key held, the result is stored.
func TestIdempotencyLostLeaseStoresNothing(t *testing.T) {
	b := redistest.Best(t)
	rdb := b.Universal(t)
	prefix := redistest.Prefix(t)
	l := lock.NewRedis(rdb, redisengine.Options{Prefix: prefix})
	defer l.Close()
	runs := 0
	drop := true
	var logs bytes.Buffer
	r := chi.NewRouter()
	r.With(middleware.Idempotency(l, middleware.IdempotencyConfig{Caller: func(*http.Request) (string, error) { return "user-7f3a", nil },
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})).Post("/orders", func(w http.ResponseWriter, r *http.Request) {
		runs++
		if drop {
			// The key's lock vanishes under the handler, as when its
			// lease ran out in Redis.
			keys, err := scanAll(rdb, prefix+"*")
			if err != nil || len(keys) == 0 {
				t.Errorf("the lock's keys: %v %v", keys, err)
			}
			for _, k := range keys {
				if !strings.HasSuffix(k, ":f") {
					rdb.Del(context.Background(), k)
				}
			}
		}
		fmt.Fprintf(w, "run %d", runs)
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	first := idemPost(t, srv.Client(), srv.URL+"/orders", "o-1-5be0c2", "card=4242-9931")
	drop = false
	second := idemPost(t, srv.Client(), srv.URL+"/orders", "o-1-5be0c2", "card=4242-9931")
	third := idemPost(t, srv.Client(), srv.URL+"/orders", "o-1-5be0c2", "card=4242-9931")
	if runs != 2 || string(first.body) != "run 1" || string(second.body) != "run 2" || second.replayed || !third.replayed || string(third.body) != "run 2" {
		t.Errorf("runs %d; answers %q, %q (replayed %v), %q (replayed %v); want the lost run's result not stored, the second stored", runs, first.body, second.body, second.replayed, third.body, third.replayed)
	}
	// The lost store is logged, with neither the key nor the body.
	if !strings.Contains(logs.String(), "not stored") {
		t.Errorf("the lost store is not logged: %q", logs.String())
	}
	if s := logs.String(); strings.Contains(s, "5be0c2") || strings.Contains(s, "4242") {
		t.Errorf("the log shows the key or the body: %s", s)
	}
}

// TestIdempotencyDuplicatesInOneProcess: duplicates that come to one
// instance while the first runs get its response when it is stored, one
// with another payload gets 422, and the handler runs once; on a route
// that fails fast, a duplicate gets 409 at once, with Retry-After.
func TestIdempotencyDuplicatesInOneProcess(t *testing.T) {
	b := redistest.Best(t)
	l := lock.NewRedis(b.Universal(t), redisengine.Options{Prefix: redistest.Prefix(t)})
	defer l.Close()
	started, finish := make(chan struct{}, 8), make(chan struct{})
	var runs atomic.Int32
	h := func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		started <- struct{}{}
		select {
		case <-finish:
		case <-time.After(10 * time.Second):
		}
		fmt.Fprintf(w, "run %d", n)
	}
	r := chi.NewRouter()
	r.With(l.Idempotent()).Post("/wait", h)
	r.With(l.Idempotent(lock.FailFast())).Post("/fast", h)
	srv := httptest.NewServer(r)
	defer srv.Close()
	c := srv.Client()

	first := make(chan answer, 1)
	go func() { first <- idemPost(t, c, srv.URL+"/wait", "d-1", "x") }()
	<-started
	const dups = 6
	got := make(chan answer, dups)
	for i := range dups {
		body := "x"
		if i == 0 {
			body = "y"
		}
		go func() { got <- idemPost(t, c, srv.URL+"/wait", "d-1", body) }()
	}
	// The duplicates are in: the handler has not run again, and a
	// duplicate on the route that fails fast is refused at once.
	fast := make(chan answer, 1)
	go func() { fast <- idemPost(t, c, srv.URL+"/fast", "f-1", "x") }()
	<-started
	if a := idemPost(t, c, srv.URL+"/fast", "f-1", "x"); a.status != http.StatusConflict || !strings.HasSuffix(problemOf(t, a), "#in-progress") {
		t.Errorf("a duplicate on a route that fails fast: %d %s, want 409 #in-progress", a.status, a.body)
	}
	close(finish)
	want := <-first
	if want.status != http.StatusOK || string(want.body) != "run 1" {
		t.Fatalf("the first: %d %q", want.status, want.body)
	}
	mismatch := 0
	for range dups {
		a := <-got
		switch {
		case a.status == http.StatusUnprocessableEntity:
			mismatch++
		case a.status != http.StatusOK || !a.replayed || !bytes.Equal(a.body, want.body):
			t.Errorf("a duplicate: %d %q (replayed %v), want the first's %q replayed", a.status, a.body, a.replayed, want.body)
		}
	}
	if mismatch != 1 {
		t.Errorf("%d duplicates refused 422, want the one with another payload", mismatch)
	}
	if f := <-fast; f.status != http.StatusOK {
		t.Errorf("the first on the route that fails fast: %d", f.status)
	}
	if n := runs.Load(); n != 2 {
		t.Errorf("the handler ran %d times, want once per route", n)
	}
}

// scanAll returns the names of the keys that match pattern, by SCAN on
// the server or on every master of a Cluster: the servers CI starts refuse
// KEYS, as managed services do.
func scanAll(rdb redis.UniversalClient, pattern string) ([]string, error) {
	ctx := context.Background()
	var mu sync.Mutex
	var names []string
	scan := func(ctx context.Context, c redis.Cmdable) error {
		it := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			names = append(names, it.Val())
			mu.Unlock()
		}
		return it.Err()
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
		return names, err
	}
	return names, scan(ctx, rdb)
}
