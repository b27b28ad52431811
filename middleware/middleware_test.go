package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/classifytest"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
	"github.com/routelock/lock/middleware"
)

func TestStatus(t *testing.T) {
	ctxErr := errors.Join(&lockcore.ContentionError{Key: "k", RetryAfter: 2500 * time.Millisecond}, context.Canceled)
	for _, tc := range []struct {
		err        error
		status     int
		retryAfter string
	}{
		{classifytest.KeyError("Param(id)", keyfunc.ErrMissing), 400, ""},
		{classifytest.KeyError("Header(X)", lockcore.ErrInvalidKey), 400, ""},
		{fmt.Errorf("%w: too many parts", lockcore.ErrInvalidKey), 400, ""},
		{fmt.Errorf("%w: short", lockcore.ErrInvalidToken), 400, ""},
		{classifytest.KeyError("JSON(a)", keyfunc.ErrTooLarge), 413, ""},
		{classifytest.NotRouted(), 500, ""},
		{&lockcore.ContentionError{Key: "k", RetryAfter: 300 * time.Millisecond}, 409, "1"},
		{ctxErr, 409, "3"},
		{fmt.Errorf("%w: dial tcp 127.0.0.1:6379: refused", lockcore.ErrUnavailable), 503, ""},
		{lockcore.ErrClosed, 503, ""},
		{errors.New("something else"), 500, ""},
	} {
		if got := middleware.Status(tc.err); got != tc.status {
			t.Errorf("Status(%v) = %d, want %d", tc.err, got, tc.status)
		}
		w := httptest.NewRecorder()
		middleware.Error(w, httptest.NewRequest("GET", "/", nil), tc.err)
		if w.Code != tc.status || w.Header().Get("Retry-After") != tc.retryAfter {
			t.Errorf("Error(%v): %d Retry-After %q, want %d %q", tc.err, w.Code, w.Header().Get("Retry-After"), tc.status, tc.retryAfter)
		}
		for _, leak := range []string{"127.0.0.1", "dial", "k\"", "something else"} {
			if strings.Contains(w.Body.String(), leak) {
				t.Errorf("Error(%v) body %q leaks %q", tc.err, w.Body.String(), leak)
			}
		}
	}
}

type recordTransport struct{ got *http.Request }

func (rt *recordTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rt.got = r
	return &http.Response{StatusCode: 204, Body: http.NoBody, Request: r}, nil
}

func TestTransport(t *testing.T) {
	rec := &recordTransport{}
	tr := middleware.Transport(rec)
	tok := lifecycle.NewToken()
	ctx, err := lifecycle.Intake(context.Background(), "Routelock-Token", []string{tok}, nil)
	if err != nil {
		t.Fatal(err)
	}

	req := httptest.NewRequest("GET", "http://svc/x", nil).WithContext(ctx)
	if _, err := tr.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if got := rec.got.Header.Get("Routelock-Token"); got != tok {
		t.Fatalf("sent token %q, want %q", got, tok)
	}
	if req.Header.Get("Routelock-Token") != "" {
		t.Fatal("Transport changed the caller's request")
	}

	plain := httptest.NewRequest("GET", "http://svc/x", nil)
	if _, err := tr.RoundTrip(plain); err != nil {
		t.Fatal(err)
	}
	if rec.got != plain || plain.Header.Get("Routelock-Token") != "" {
		t.Fatal("a request without a token was changed")
	}
}

func TestConfigPanics(t *testing.T) {
	l, err := redisengine.New(redisClientNowhere(t), redisengine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rpcOnly := keyfunc.Custom(keyfunc.Source{Name: "x", RPC: func(context.Context, any) (string, error) { return "", nil }})
	for name, c := range map[string]middleware.Config{
		"zero key":     {},
		"rpc key":      {Key: rpcOnly},
		"TTL too low":  {Key: keyfunc.Param("id"), Policy: lifecycle.Policy{TTL: time.Millisecond}},
		"negative TTL": {Key: keyfunc.Param("id"), Policy: lifecycle.Policy{TTL: -time.Second}},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Lock did not panic", name)
				}
			}()
			middleware.Lock(lifecycle.Serve(l, nil), c)
		}()
	}
}

func redisClientNowhere(t *testing.T) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestTransportRedirect: a redirect to another host (another port of
// loopback, as another service's would be) arrives there without the owner
// tokens, as net/http's client drops Authorization and Cookie; a redirect
// within the same host still carries them.
func TestTransportRedirect(t *testing.T) {
	var got sync.Map // path → the token header it received
	record := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.URL.Path, r.Header.Get("Routelock-Token"))
	})
	other := httptest.NewServer(record)
	t.Cleanup(other.Close)
	mux := http.NewServeMux()
	mux.Handle("/same", record)
	mux.HandleFunc("/to-other", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/elsewhere", http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("/to-same", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/same", http.StatusFound)
	})
	home := httptest.NewServer(mux)
	t.Cleanup(home.Close)

	tok := lifecycle.NewToken()
	ctx, err := lifecycle.Intake(context.Background(), "Routelock-Token", []string{tok}, nil)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: middleware.Transport(nil), Timeout: 10 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	for _, path := range []string{"/to-other", "/to-same"} {
		req, err := http.NewRequestWithContext(ctx, "GET", home.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
	}
	if v, ok := got.Load("/elsewhere"); !ok || v != "" {
		t.Errorf("the other host received %q (reached: %v), want no token", v, ok)
	}
	if v, ok := got.Load("/same"); !ok || v != tok {
		t.Errorf("a redirect within the host received %q (reached: %v), want the token", v, ok)
	}
}
