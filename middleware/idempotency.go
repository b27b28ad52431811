package middleware

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/routelock/lock/internal/idem"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/lockcore"
)

// IdempotencyConfig configures Idempotency. Its zero value is usable: the
// Idempotency-Key header, required, requests scoped by method and route
// only, results kept 24 hours, request and stored response bodies up to
// 1 MiB.
type IdempotencyConfig struct {
	// Header is the request header that carries the key. Default:
	// "Idempotency-Key".
	Header string

	// Optional lets a request without the header through, unlocked and
	// unrecorded. Default: such a request is answered 400.
	Optional bool

	// Caller returns the identity of the request's caller, as the server
	// knows it (an authenticated user or tenant, never a value the client
	// may choose freely), or "" for none: the same key sent by two callers
	// names two requests. An error refuses the request with 401 and is not
	// shown to the client. Default: nil, every request the same caller;
	// keys are then scoped by the method and the route alone.
	Caller func(*http.Request) (string, error)

	// Fingerprint returns what identifies the request's payload, given the
	// request and its body: a request that reuses a key with another
	// fingerprint is answered 422. Default: the method, the path, the
	// query and the body, byte for byte.
	Fingerprint func(r *http.Request, body []byte) []byte

	// MaxBody is the most bytes of a request body that are read (the
	// fingerprint covers it, and the handler reads it from memory); a
	// longer one is answered 413. Default: 1 MiB.
	MaxBody int64

	// MaxStored is the most bytes of a response body that are stored. A
	// longer response goes out to its client as it is written, is not
	// stored, and a retry of its key is answered 410. Default: 1 MiB.
	MaxStored int

	// Keep is how long a result is kept: a key reused later is a new
	// request. Default: 24 hours.
	Keep time.Duration

	// Headers are the response headers that are stored and replayed
	// (canonical names). Default: Content-Type, Content-Language,
	// Content-Encoding, Location, ETag, Last-Modified, Cache-Control and
	// Retry-After.
	Headers []string

	// Policy is how the key's lock is taken: how long a duplicate that
	// arrives while the first request runs waits for its result
	// (lockcore.FailFast: not at all, 409 at once), and the lease. Share
	// and Segments are refused.
	Policy lifecycle.Policy

	// Problems is the URI that the problem types of the refusals are
	// fragments of, such as "https://api.example.com/docs/idempotency":
	// the draft asks for a link to the resource's idempotency policy.
	// Default: routelock's docs/idempotency.md on GitHub, whose sections are
	// named after the fragments.
	Problems string

	// Logger, if set, is told when a result could not be stored. The line
	// names the route, never the key, the caller or a body. Default: nil,
	// silent.
	Logger *slog.Logger
}

// The defaults of IdempotencyConfig.
const (
	defaultIdemHeader = "Idempotency-Key"
	defaultMaxBody    = 1 << 20
	defaultMaxStored  = 1 << 20
	defaultKeep       = 24 * time.Hour
	defaultProblems   = "https://github.com/routelock/lock/blob/main/docs/idempotency.md"
)

var defaultReplayed = []string{"Content-Type", "Content-Language", "Content-Encoding", "Location", "ETag", "Last-Modified", "Cache-Control", "Retry-After"}

// Idempotency returns middleware that runs a request once per key, as the
// IETF draft "The Idempotency-Key HTTP Header Field" describes and Stripe
// does: the first request with a key runs; a duplicate that comes while
// it runs waits for it, in line, and gets its response; a retry after it
// gets the stored response, byte for byte, marked with
// Idempotent-Replayed: true.
//
// The key is the value of the Idempotency-Key header, a Structured Field
// string ("..."; an unquoted value of visible characters is taken too),
// 1 to 255 characters. What a request is looked up by is the key together
// with what the server knows and the client cannot forge: the method, the
// route's template and the caller (IdempotencyConfig.Caller). Each such
// lookup key is a lock of l's engine, which must keep results
// (lockcore.Results: the Redis engine and the in-memory one of
// package locktest do); the response is stored with
// the lock's release, in one step, only while its lease is live: a
// request whose lease was lost stores nothing, and no duplicate can run
// between the handler's end and the store.
//
// Refusals are application/problem+json:
//
//	400 Bad Request             no key (unless Optional), or a malformed one
//	401 Unauthorized            Caller failed
//	409 Conflict                a duplicate whose wait ran out while the first runs (Retry-After)
//	410 Gone                    a retry of a request whose response was not stored:
//	                            over MaxStored, streamed (Flush), hijacked
//	413 Content Too Large       a body over MaxBody
//	422 Unprocessable Content   the key reused with another payload
//	503 Service Unavailable     the engine unreachable, or its restart guard refusing
//	                            fresh locks after Redis lost its data (Retry-After)
//
// A handler that panics stores a 500, which its retries get. Responses
// over MaxStored, and those the handler flushes or hijacks, go out as they
// are written and are not stored. A response is sent once it is stored:
// the handler's writes are held in memory until it returns. The handler's
// context is not cancelled when its client leaves, whose retry is to get
// what the run comes to; the request's deadline still ends it.
//
// A request runs once per key as long as Redis keeps its data. A process
// killed while its handler runs stores nothing: a duplicate waits in line
// until the killed one's lease runs out (the Policy's TTL), then runs the
// handler. A Redis restarted without its data (no append-only file) has
// lost the stored results and the holds of the requests running then:
// their contexts are cancelled with lockcore.ErrLockLost and their
// responses are not stored. For the Redis engine's MaxTTL after the
// restart, its restart guard lets no request with a key run: one that may
// not wait that long is answered 503 with Retry-After, one that may waits
// it out. After that, a retry of any key whose result was lost, finished
// or not, runs the handler a second time: an effect of the first run that
// the application did not record under the key itself (a charge, a
// message) happens twice. The second run's fencing token
// (lock.FencingToken) is greater than the first one's, so that a store
// given it refuses the first run's writes that come after the second's.
//
// Panics if l's engine keeps no results, or c is invalid.
func Idempotency(l lifecycle.Locker, c IdempotencyConfig) func(http.Handler) http.Handler {
	m := newIdem(l, c)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
	}
}

// idempotency is one configured Idempotency middleware.
type idempotency struct {
	l        lifecycle.Locker
	c        IdempotencyConfig
	policy   lifecycle.Policy
	replayed map[string]bool
	flights  flights
}

// flights are the requests of this middleware that lead their key's
// duplicates in this process: each leader asks Redis, and those that
// follow it wait for what it found or stored. On a route that fails fast
// (lockcore.FailFast) nobody follows: a duplicate is answered 409 at once.
type flights struct {
	mu       sync.Mutex
	m        map[lockcore.Key]*flight
	coalesce bool
}

// flight is a leader's: done is closed when it has ended, with res the
// stored result it found or stored, or nil when it has none.
type flight struct {
	done   chan struct{}
	res    []byte
	landed bool // under flights.mu
}

// join returns the flight of key, and whether the caller leads it: a new
// one, when none is under way.
func (fs *flights) join(key lockcore.Key) (*flight, bool) {
	if !fs.coalesce {
		return nil, true
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f := fs.m[key]; f != nil {
		return f, false
	}
	f := &flight{done: make(chan struct{})}
	fs.m[key] = f
	return f, true
}

// set records res as what the flight came to, if the caller leads it.
func (f *flight) set(lead bool, res []byte) {
	if lead && f != nil {
		f.res = res
	}
}

// land ends f, the flight of key, the first time it is called.
func (fs *flights) land(key lockcore.Key, f *flight) {
	if f == nil {
		return
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f.landed {
		return
	}
	f.landed = true
	delete(fs.m, key)
	close(f.done)
}

// follow waits for f to land, within the route's wait and ctx, and
// returns the result it found or stored, or nil, and what is left of the
// wait: 0 when it ended first.
func (m *idempotency) follow(ctx context.Context, f *flight) ([]byte, time.Duration) {
	wait := lifecycle.WaitOf(m.policy)
	start := time.Now()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-f.done:
		return f.res, wait - time.Since(start)
	case <-t.C:
	case <-ctx.Done():
	}
	return nil, 0
}

func newIdem(l lifecycle.Locker, c IdempotencyConfig) *idempotency {
	if l == nil {
		panic("routelock: middleware.Idempotency: nil Engine")
	}
	if lifecycle.ResultsOf(l) == nil {
		panic(fmt.Sprintf("%v: middleware.Idempotency: the engine keeps no results (lockcore.Promises.Results)", lockcore.ErrMisconfigured))
	}
	if c.Policy.Share != 0 || c.Policy.Segments != 0 {
		panic(fmt.Sprintf("%v: middleware.IdempotencyConfig.Policy: a key's lock is exclusive and whole (no Share, no Segments)", lockcore.ErrMisconfigured))
	}
	if c.MaxBody < 0 || c.MaxStored < 0 || c.Keep < 0 {
		panic("routelock: middleware.IdempotencyConfig: MaxBody, MaxStored and Keep must not be negative")
	}
	if c.Keep > 0 && c.Keep < time.Second {
		panic(fmt.Sprintf("routelock: middleware.IdempotencyConfig: Keep %v: keep results a second at least", c.Keep))
	}
	p, err := lifecycle.Prepare(l, c.Policy)
	if err != nil {
		panic(fmt.Sprintf("%v (middleware.IdempotencyConfig.Policy)", err))
	}
	if c.Header == "" {
		c.Header = defaultIdemHeader
	}
	c.Header = http.CanonicalHeaderKey(c.Header)
	if c.MaxBody == 0 {
		c.MaxBody = defaultMaxBody
	}
	if c.MaxStored == 0 {
		c.MaxStored = defaultMaxStored
	}
	if c.Keep == 0 {
		c.Keep = defaultKeep
	}
	if c.Problems == "" {
		c.Problems = defaultProblems
	}
	hs := c.Headers
	if hs == nil {
		hs = defaultReplayed
	}
	m := &idempotency{l: l, c: c, policy: p, replayed: make(map[string]bool, len(hs))}
	m.flights.m = make(map[lockcore.Key]*flight)
	m.flights.coalesce = lifecycle.WaitOf(p) > 0
	for _, h := range hs {
		m.replayed[http.CanonicalHeaderKey(h)] = true
	}
	return m
}

func (m *idempotency) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if r.Context().Value(runningKey{}) == m {
		// This middleware mounted again on the route (on a router and on
		// its subrouter), inside its own run: the run holds the key and
		// stores what the handler answers.
		next.ServeHTTP(w, r)
		return
	}
	vs := r.Header.Values(m.c.Header)
	if len(vs) == 0 {
		if m.c.Optional {
			next.ServeHTTP(w, r)
			return
		}
		m.problem(w, http.StatusBadRequest, "missing-key", "Idempotency key missing", "this operation requires an "+m.c.Header+" header")
		return
	}
	ik, ok := idem.ParseKey(vs)
	if !ok {
		m.problem(w, http.StatusBadRequest, "malformed-key", "Idempotency key malformed", "the "+m.c.Header+" header must be one string of 1 to 255 visible characters")
		return
	}
	caller := ""
	if m.c.Caller != nil {
		id, err := m.c.Caller(r)
		if err != nil {
			m.problem(w, http.StatusUnauthorized, "caller", "Caller unknown", "the caller of this request could not be identified")
			return
		}
		caller = id
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, m.c.MaxBody+1))
	if err != nil {
		m.problem(w, http.StatusBadRequest, "body", "Request body unreadable", "the request body could not be read")
		return
	}
	if int64(len(body)) > m.c.MaxBody {
		m.problem(w, http.StatusRequestEntityTooLarge, "body-too-large", "Request body too large", "the request body is over "+strconv.FormatInt(m.c.MaxBody, 10)+" bytes")
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	fp := m.fingerprint(r, body)
	// Keys are scoped by the route's template; by the path where no
	// router knows one. Telemetry sees the template alone.
	route := routeTemplate(r, "")
	op := route
	if op == "" {
		op = r.URL.EscapedPath()
	}
	key, err := idem.LockKey([]string{r.Method, op}, caller, ik)
	if err != nil {
		m.problem(w, http.StatusBadRequest, "unscoped", "Request cannot be scoped", "the request's method, route or caller cannot name an idempotency key")
		return
	}
	ctx := r.Context()
	// Duplicates in this process wait for the first of them, in memory,
	// rather than each in line for the key's lock in turn.
	policy := m.policy
	var f *flight
	lead := true
	if len(lifecycle.TokensFrom(ctx)) == 0 {
		// A request that carries owner tokens may be nested in the
		// flight's first request, which waits for it: it goes to the
		// engine, where it re-enters that request's hold.
		f, lead = m.flights.join(key)
	}
	if !lead {
		res, left := m.follow(ctx, f)
		switch {
		case res != nil:
			m.replay(w, r, route, res, fp)
			return
		case left <= 0:
			m.refuse(w, r, route, &lockcore.ContentionError{Key: key.String(), TimedOut: true})
			return
		}
		// The first came to no result (it failed, or its own wait ran
		// out): this one goes its own way, with the wait it has left.
		policy.Wait = left
	} else {
		defer m.flights.land(key, f)
	}
	// The run outlives its client: a client that gave up retries, and the
	// retry is to get what the run comes to, not an answer cut short by
	// its leaving. The wait in line still ends with the request, and the
	// run at the request's deadline.
	actx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	if d, ok := ctx.Deadline(); ok {
		var stop context.CancelFunc
		actx, stop = context.WithDeadline(actx, d)
		defer stop()
	}
	unhook := context.AfterFunc(ctx, func() {
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			cancel(context.Cause(ctx))
		}
	})
	// The lock, or the result: a retry after the first request finished
	// finds it without the lock, and a duplicate in line while the first
	// runs finds it as soon as the first kept it, without taking the lock
	// in turn.
	lease, res, err := lifecycle.AcquireOrResult(actx, m.l, key, policy)
	if res != nil {
		unhook()
		f.set(lead, res)
		if lead {
			m.flights.land(key, f) // its followers need not wait for its client
		}
		m.replay(w, r, route, res, fp)
		return
	}
	if !unhook() && err == nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// The client left as the lock was granted: nothing ran.
		_ = lease.Release(ctx)
		return
	}
	if err != nil {
		m.refuse(w, r, route, err)
		return
	}
	if lease.Reentered() {
		// A request nested in the one that holds the key (by a propagated
		// owner token) is that request's duplicate, in progress.
		_ = lease.Release(ctx)
		m.refuse(w, r, route, &lockcore.ContentionError{Key: key.String()})
		return
	}
	m.run(w, r, next, route, key, lease, fp, f, lead)
}

// runningKey is the context key under which a run's handler finds the
// middleware that runs it (serve).
type runningKey struct{}

// run runs next for r under lease, the first holder of its key, and stores
// its response with the lease's release.
func (m *idempotency) run(w http.ResponseWriter, r *http.Request, next http.Handler, route string, key lockcore.Key, lease *lifecycle.Lease, fp [sha256.Size]byte, f *flight, lead bool) {
	c := &capture{w: w, max: m.c.MaxStored}
	finished := false
	defer func() {
		if finished {
			return
		}
		// The handler panicked: its retries get a 500, not a second run.
		body := m.problemBody(http.StatusInternalServerError, "failed", "Request failed", "the request with this key failed while it ran")
		f.set(lead, m.keep(r, route, lease, &idem.Record{Fingerprint: fp, Status: http.StatusInternalServerError,
			Fields: [][2]string{{"Content-Type", "application/problem+json"}}, Size: int64(len(body)), Body: body}))
	}()
	next.ServeHTTP(c, r.WithContext(context.WithValue(lease.Context(), runningKey{}, m)))
	finished = true
	if c.reason != "" {
		f.set(lead, m.keep(r, route, lease, &idem.Record{Fingerprint: fp, Status: c.code(), Reason: c.reason, Size: c.size}))
		return
	}
	rec := &idem.Record{Fingerprint: fp, Status: c.code(), Size: c.size, Body: c.buf.Bytes()}
	for k, vs := range w.Header() {
		if m.replayed[k] {
			for _, v := range vs {
				rec.Fields = append(rec.Fields, [2]string{k, v})
			}
		}
	}
	f.set(lead, m.keep(r, route, lease, rec))
	if lead {
		// The duplicates have what they wait for: they do not wait on
		// this client's reading of its response.
		m.flights.land(key, f)
	}
	// Sent once stored, or once it is certain it was not: either way the
	// handler ran, and this is what it answered.
	w.WriteHeader(c.code())
	_, _ = w.Write(c.buf.Bytes())
}

// keep stores rec with the release of lease, and logs a failure. It
// returns rec as stored, or nil when it may not be.
func (m *idempotency) keep(r *http.Request, route string, lease *lifecycle.Lease, rec *idem.Record) []byte {
	ctx := context.WithoutCancel(r.Context())
	b := rec.Encode()
	err := lifecycle.Keep(ctx, lease, b, m.c.Keep)
	switch {
	case err != nil:
		lifecycle.ResultSeen(ctx, m.l, route, lifecycle.ResultLost, 0)
		if m.c.Logger != nil {
			msg := "routelock: the response of an idempotent request was not stored: a retry of its key runs it again"
			if errors.Is(err, lockcore.ErrUnavailable) {
				msg = "routelock: the response of an idempotent request may not be stored: Redis did not answer in time; the store goes on in the background while its lease lasts"
			}
			m.c.Logger.Warn(msg, "route", route, "err", err)
		}
	case rec.Reason != "":
		lifecycle.ResultSeen(ctx, m.l, route, lifecycle.ResultNotStored, len(b))
	default:
		lifecycle.ResultSeen(ctx, m.l, route, lifecycle.ResultStored, len(b))
	}
	if err != nil {
		return nil
	}
	return b
}

// refuse answers a request whose lookup or lock failed.
func (m *idempotency) refuse(w http.ResponseWriter, r *http.Request, route string, err error) {
	switch status := Status(err); status {
	case http.StatusConflict:
		lifecycle.ResultSeen(r.Context(), m.l, route, lifecycle.ResultConflict, 0)
		secs := int64(1)
		var cerr *lockcore.ContentionError
		if errors.As(err, &cerr) && cerr.RetryAfter > time.Second {
			secs = int64((cerr.RetryAfter + time.Second - 1) / time.Second)
		}
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		m.problem(w, status, "in-progress", "Request in progress", "a request with this key is in progress; retry later")
	case http.StatusServiceUnavailable:
		detail := "the idempotency store is unavailable; retry later"
		var gerr *lockcore.RestartGuardError
		if errors.As(err, &gerr) {
			// The guard's time left, as middleware.Error tells it.
			w.Header().Set("Retry-After", strconv.FormatInt(max(int64((gerr.RetryAfter+time.Second-1)/time.Second), 1), 10))
			detail = "the idempotency store restarted without its data: no request runs until every earlier one has ended; retry later"
		}
		m.problem(w, status, "unavailable", "Service unavailable", detail)
	default:
		if m.c.Logger != nil {
			m.c.Logger.Error("routelock: an idempotent request was refused", "route", route, "err", err)
		}
		m.problem(w, http.StatusInternalServerError, "internal", "Internal error", "the request could not be served")
	}
}

// replay answers with res, a stored result, for a request with fingerprint fp.
func (m *idempotency) replay(w http.ResponseWriter, r *http.Request, route string, res []byte, fp [sha256.Size]byte) {
	rec, err := idem.Decode(res)
	switch {
	case err == nil && rec.Fingerprint == fp:
		lifecycle.ResultSeen(r.Context(), m.l, route, lifecycle.ResultReplayed, 0)
	case err == nil:
		lifecycle.ResultSeen(r.Context(), m.l, route, lifecycle.ResultMismatch, 0)
	}
	switch {
	case err != nil:
		m.problem(w, http.StatusInternalServerError, "internal", "Internal error", "the stored response of this key is unreadable")
	case rec.Fingerprint != fp:
		m.problem(w, http.StatusUnprocessableEntity, "key-reused", "Idempotency key reused", "this key was used with another request payload")
	case rec.Reason != "":
		w.Header().Set("Idempotent-Replayed", "true")
		m.problem(w, http.StatusGone, "not-stored", "Response not stored",
			"the request with this key ran, and answered "+strconv.Itoa(rec.Status)+"; its response was not stored ("+rec.Reason+")")
	default:
		// The stored lines of a field replace what the middleware before
		// this one set of it, as they did in the first response.
		h := w.Header()
		set := make(map[string]bool, len(rec.Fields))
		for _, f := range rec.Fields {
			if !set[f[0]] {
				set[f[0]] = true
				h[f[0]] = nil
			}
			h[f[0]] = append(h[f[0]], f[1])
		}
		h.Set("Idempotent-Replayed", "true")
		w.WriteHeader(rec.Status)
		_, _ = w.Write(rec.Body)
	}
}

// problem answers with an RFC 9457 problem of type m.c.Problems#kind.
func (m *idempotency) problem(w http.ResponseWriter, status int, kind, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(m.problemBody(status, kind, title, detail))
}

func (m *idempotency) problemBody(status int, kind, title, detail string) []byte {
	b, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{m.c.Problems + "#" + kind, title, status, detail})
	return b
}

// fingerprint returns the digest of r's payload.
func (m *idempotency) fingerprint(r *http.Request, body []byte) [sha256.Size]byte {
	d := sha256.New()
	if m.c.Fingerprint != nil {
		d.Write(m.c.Fingerprint(r, body))
	} else {
		for _, s := range []string{r.Method, r.URL.EscapedPath(), r.URL.RawQuery} {
			d.Write(strconv.AppendInt(nil, int64(len(s)), 10))
			d.Write([]byte{':'})
			d.Write([]byte(s))
		}
		d.Write(body)
	}
	var fp [sha256.Size]byte
	d.Sum(fp[:0])
	return fp
}

// capture holds a handler's response in memory, up to max bytes of body,
// and lets it through as written once it grows over that, or the handler
// flushes or hijacks it; reason then says why it is not stored.
type capture struct {
	w      http.ResponseWriter
	max    int
	status int
	buf    bytes.Buffer
	size   int64
	reason string
}

func (c *capture) Header() http.Header { return c.w.Header() }

func (c *capture) code() int {
	if c.status == 0 {
		return http.StatusOK
	}
	return c.status
}

func (c *capture) WriteHeader(code int) {
	switch {
	case c.reason != "":
		c.w.WriteHeader(code)
	case code >= 100 && code < 200 && code != http.StatusSwitchingProtocols:
		c.w.WriteHeader(code) // informational: not the response
	case c.status == 0:
		c.status = code
	}
}

func (c *capture) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	c.size += int64(len(p))
	if c.reason == "" && c.buf.Len()+len(p) > c.max {
		c.pass("over " + strconv.Itoa(c.max) + " bytes")
	}
	if c.reason != "" {
		return c.w.Write(p)
	}
	return c.buf.Write(p)
}

// pass lets the response through from now on, for reason.
func (c *capture) pass(reason string) {
	c.reason = reason
	if c.status == 0 {
		return // nothing written yet
	}
	c.w.WriteHeader(c.status)
	_, _ = c.w.Write(c.buf.Bytes())
	c.buf = bytes.Buffer{}
}

// FlushError lets the response through, flushed (http.ResponseController).
func (c *capture) FlushError() error {
	if c.reason == "" {
		if c.status == 0 {
			c.status = http.StatusOK
		}
		c.pass("flushed")
	}
	return http.NewResponseController(c.w).Flush()
}

// Flush is FlushError, for http.Flusher.
func (c *capture) Flush() { _ = c.FlushError() }

// Hijack hands the connection over: nothing more is stored.
func (c *capture) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if c.reason == "" {
		c.reason = "hijacked"
	}
	return http.NewResponseController(c.w).Hijack()
}

// Unwrap returns the ResponseWriter under c, for http.ResponseController.
func (c *capture) Unwrap() http.ResponseWriter { return c.w }
