package lock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/interceptor"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
	"github.com/routelock/lock/lockcore/redisengine"
	"github.com/routelock/lock/middleware"
)

// otherPrefix matches a package's name used as an error prefix, at the
// start of a text or of a wrapped part of it: every error and panic of
// the module reads "routelock: " once, and names a package, where it
// says where the error arose, by a qualified name (keyfunc.Join).
var otherPrefix = regexp.MustCompile(`(^|[^A-Za-z0-9_./])(lock|lockcore|keyfunc|middleware|interceptor|redisengine|locktest|admin|lockotel|routelock/[a-z]+): `)

// wantOnePrefix fails unless text reads "routelock: " once, at its start,
// and no package's name as a prefix anywhere.
func wantOnePrefix(t *testing.T, what, text string) {
	t.Helper()
	switch {
	case !strings.HasPrefix(text, "routelock: "):
		t.Errorf("%s: %q does not start with routelock: ", what, text)
	case strings.Count(text, "routelock:") != 1:
		t.Errorf("%s: %q says routelock: more than once", what, text)
	case otherPrefix.MatchString(text):
		t.Errorf("%s: %q has another prefix: %q", what, text, otherPrefix.FindString(text))
	}
}

// panicText returns what f panics with, as text; "" if it does not.
func panicText(f func()) (s string) {
	defer func() {
		if r := recover(); r != nil {
			s = fmt.Sprint(r)
		}
	}()
	f()
	return ""
}

// TestErrorTexts: the errors and panics a user meets, provoked as a user
// provokes them (a chi route whose key names a parameter it does not
// have, a lease lost to an operator or its MaxHold, a wait that ran out, a
// misconfigured gRPC interceptor, Redis out of reach), each read
// "routelock: " once and no other prefix, however many packages wrapped
// them; and they still match their sentinels.
func TestErrorTexts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e := new(locktest.Engine)
	k, err := lockcore.NewKey("productID", "42")
	if err != nil {
		t.Fatal(err)
	}
	type text struct {
		what string
		err  error  // the error, when there is one
		s    string // its text, or a panic's or a body's
		is   error  // the sentinel err matches; nil for a panic or body
	}
	var texts []text
	add := func(what string, err, is error) {
		if err == nil {
			t.Errorf("%s: no error", what)
			return
		}
		texts = append(texts, text{what: what, err: err, s: err.Error(), is: is})
	}
	addText := func(what, s string) {
		if s == "" {
			t.Errorf("%s: nothing", what)
			return
		}
		texts = append(texts, text{what: what, s: strings.TrimSuffix(s, "\n")})
	}

	// A chi route that names {productID}, locked by productId.
	var routeErr error
	r := chi.NewRouter()
	r.With(middleware.Lock(lifecycle.Serve(e, nil), middleware.Config{
		Key: keyfunc.Param("productId"),
		OnError: func(w http.ResponseWriter, req *http.Request, err error) {
			routeErr = err
			middleware.Error(w, req, err)
		},
	})).Post("/products/{productID}/buy", func(http.ResponseWriter, *http.Request) {})
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest("POST", "/products/42/buy", nil))
	add("Param of a parameter the route lacks", routeErr, lockcore.ErrMisconfigured)
	addText("its 500 body", rec.Body.String())

	// A custom key function that reports a missing value with keyfunc's
	// own sentinel.
	_, _, err = keyfunc.Custom(keyfunc.Source{Name: "tenant", HTTP: func(*http.Request) (string, error) { return "", keyfunc.ErrMissing }}).
		HTTP(httptest.NewRequest("GET", "/", nil))
	add("Custom returning keyfunc.ErrMissing", err, keyfunc.ErrMissing)

	// A lease revoked by an operator, one past its MaxHold, a wait that
	// ran out, a lease lost wrapped once more.
	ls, err := lifecycle.Serve(e, nil).Acquire(ctx, k, lifecycle.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = lifecycle.Serve(e, nil).Acquire(ctx, k, lifecycle.Policy{Wait: 10 * time.Millisecond})
	add("wait ran out", err, lockcore.ErrWaitTimeout)
	if _, err := e.Revoke(ctx, k, "test"); err != nil {
		t.Fatal(err)
	}
	<-ls.Context().Done() // bounded by ctx, from which it derives
	add("revoked lease's context", context.Cause(ls.Context()), lockcore.ErrLockLost)
	add("revoked lease's Release", ls.Release(ctx), lockcore.ErrRevoked)
	add("lease lost, wrapped", fmt.Errorf("%w: the key is gone", lockcore.ErrLockLost), lockcore.ErrLockLost)
	ls, err = lifecycle.Serve(e, nil).Acquire(ctx, k, lifecycle.Policy{MaxHold: 30 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	<-ls.Context().Done()
	add("lease past its MaxHold", context.Cause(ls.Context()), lockcore.ErrMaxHold)
	_ = ls.Release(ctx)

	// The gRPC interceptor misconfigured.
	addText("interceptor.Method of a malformed name", panicText(func() { interceptor.Method("shop.Inventory/Reserve", interceptor.Field("product_id")) }))
	addText("interceptor rule with an invalid Policy", panicText(func() {
		interceptor.UnaryServer(lifecycle.Serve(e, nil), interceptor.Config{Rules: []interceptor.Rule{{Method: "/shop.Inventory/Reserve", Key: interceptor.Field("product_id"), Policy: lifecycle.Policy{TTL: time.Millisecond}}}})
	}))
	addText("interceptor.Field with an empty segment", panicText(func() { interceptor.Field("order..user_id") }))
	addText("keyfunc.Join of nothing", panicText(func() { keyfunc.Join() }))
	srv := grpc.NewServer()
	add("interceptor.Check of a rule for no method", interceptor.Check(srv, interceptor.Method("/shop.Nope/Reserve", interceptor.Field("product_id"))), lockcore.ErrMisconfigured)

	// Redis out of reach.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	locker := lock.New(rdb)
	t.Cleanup(func() { _ = locker.Close() })
	_, err = locker.Acquire(ctx, k, lifecycle.Policy{Wait: lockcore.FailFast})
	add("Acquire with Redis unreachable", err, lockcore.ErrUnavailable)
	add("Check with Redis unreachable", locker.Check(ctx), lockcore.ErrUnavailable)
	_, err = redisengine.New(nil, redisengine.Options{})
	add("redisengine.New(nil)", err, nil)
	addText("lock.New with an invalid option", panicText(func() { lock.New(rdb, lock.Defaults(lifecycle.Policy{TTL: time.Millisecond})) }))

	for _, tx := range texts {
		for _, line := range strings.Split(tx.s, "\n") {
			wantOnePrefix(t, tx.what, line)
		}
		if tx.is != nil && !errors.Is(tx.err, tx.is) {
			t.Errorf("%s: %v does not match %v", tx.what, tx.err, tx.is)
		}
	}
}
