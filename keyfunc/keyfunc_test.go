package keyfunc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/routelock/lock/internal/chiroute"
	"github.com/routelock/lock/internal/keylimit"
	"github.com/routelock/lock/internal/keyview"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
)

// capture is a handler that records what f makes of the request it gets
// and, when the key functions let it through, reads the body back.
type capture struct {
	f     keyfunc.Func
	parts []string
	err   error
	body  string
	ran   bool
}

func (c *capture) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.ran = true
		c.parts, _, c.err = c.f.HTTP(r)
		next.ServeHTTP(w, r)
	})
}

func (c *capture) handler(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	c.body = string(b)
}

func wantParts(t *testing.T, got []string, err error, want ...string) {
	t.Helper()
	if err != nil {
		t.Fatalf("err = %v, want parts %q", err, want)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parts = %q, want %q", got, want)
	}
}

// Stand-ins for wantErr's want: the kinds of key error that no exported
// sentinel of their own names.
var (
	// errInvalid: a value stated wrongly, matching lockcore.ErrInvalidKey
	// but not keyfunc.ErrMissing.
	errInvalid = errors.New("invalid")
	// errNotInRoute: a lock on a route that cannot name the parameter,
	// matching lockcore.ErrMisconfigured.
	errNotInRoute = errors.New("the route has no such parameter")
	// errNotRouted: a request no router has matched, matching
	// lockcore.ErrMisconfigured.
	errNotRouted = errors.New("request not routed")
)

// public returns what err tells the client, "" if it says nothing.
func public(err error) string {
	var p interface{ Public() string }
	if errors.As(err, &p) {
		return p.Public()
	}
	return ""
}

func wantErr(t *testing.T, got []string, err, want error) {
	t.Helper()
	pub := public(err)
	var ok bool
	switch want {
	case errInvalid:
		ok = errors.Is(err, lockcore.ErrInvalidKey) && !errors.Is(err, keyfunc.ErrMissing)
	case errNotInRoute:
		ok = errors.Is(err, lockcore.ErrMisconfigured) && (strings.HasSuffix(pub, ": the route has no such parameter") ||
			strings.HasSuffix(pub, ": no route of the router has such a parameter"))
	case errNotRouted:
		ok = errors.Is(err, lockcore.ErrMisconfigured) && strings.HasSuffix(pub, ": request not routed")
	default:
		ok = errors.Is(err, want)
	}
	if !ok {
		t.Fatalf("err = %v (parts %q, public %q), want %v", err, got, pub, want)
	}
	if want != keyfunc.ErrSkip {
		if src, _, _ := strings.Cut(pub, ": "); src == "" || src == pub {
			t.Fatalf("err = %#v, want a Public() naming its source", err)
		}
	}
}

// TestParamChi puts Param at every place chi middleware can sit. Where the
// router has not matched the route yet (a router's own Use, at the top, in
// Route or on a mounted router) a route without the parameter is skipped
// (ErrSkip); where the middleware wraps one route (With, Group's Use), that
// route lacking the parameter is a configuration error (lockcore.ErrMisconfigured).
func TestParamChi(t *testing.T) {
	type place struct {
		name          string
		build         func(c *capture) http.Handler
		health, users error // what /health and /users/7/x get
	}
	places := []place{
		{"top-level Use", func(c *capture) http.Handler {
			r := chi.NewRouter()
			r.Use(c.middleware)
			r.Post("/products/{productID}/buy", c.handler)
			r.Get("/health", c.handler)
			r.Post("/users/{userID}/x", c.handler)
			return r
		}, keyfunc.ErrSkip, keyfunc.ErrSkip},
		{"With", func(c *capture) http.Handler {
			r := chi.NewRouter()
			r.With(c.middleware).Post("/products/{productID}/buy", c.handler)
			r.With(c.middleware).Get("/health", c.handler)
			r.With(c.middleware).Post("/users/{userID}/x", c.handler)
			return r
		}, errNotInRoute, errNotInRoute},
		{"Use inside Route", func(c *capture) http.Handler {
			r := chi.NewRouter()
			r.Route("/products", func(r chi.Router) {
				r.Use(c.middleware)
				r.Post("/{productID}/buy", c.handler)
			})
			r.Route("/users/{userID}", func(r chi.Router) {
				r.Use(c.middleware)
				r.Post("/x", c.handler)
			})
			r.With(c.middleware).Get("/health", c.handler)
			return r
		}, errNotInRoute, keyfunc.ErrSkip},
		{"Use inside Group", func(c *capture) http.Handler {
			r := chi.NewRouter()
			r.Group(func(r chi.Router) {
				r.Use(c.middleware)
				r.Post("/products/{productID}/buy", c.handler)
				r.Get("/health", c.handler)
				r.Post("/users/{userID}/x", c.handler)
			})
			return r
		}, errNotInRoute, errNotInRoute},
		{"Use on mounted router", func(c *capture) http.Handler {
			sub := chi.NewRouter()
			sub.Use(c.middleware)
			sub.Post("/{productID}/buy", c.handler)
			users := chi.NewRouter()
			users.Use(c.middleware)
			users.Post("/x", c.handler)
			r := chi.NewRouter()
			r.Use(c.middleware) // twice: top level and mounted
			r.Mount("/products", sub)
			r.Mount("/users/{userID}", users)
			r.Get("/health", c.handler)
			return r
		}, keyfunc.ErrSkip, keyfunc.ErrSkip},
	}
	for _, p := range places {
		t.Run(p.name, func(t *testing.T) {
			c := &capture{f: keyfunc.Param("productID")}
			h := p.build(c)

			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/products/42/buy", strings.NewReader("body")))
			wantParts(t, c.parts, c.err, "productID", "42")
			if c.body != "body" {
				t.Fatalf("handler read %q", c.body)
			}

			*c = capture{f: c.f}
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/health", nil))
			wantErr(t, c.parts, c.err, p.health)

			*c = capture{f: c.f}
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/users/7/x", nil))
			wantErr(t, c.parts, c.err, p.users)

			// The user ID resolves too, through the parent's parameters.
			*c = capture{f: keyfunc.Param("userID")}
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/users/7/x", nil))
			wantParts(t, c.parts, c.err, "userID", "7")
		})
	}
}

// TestParamChiUnrouted: requests the router will answer 405 are not
// locked, a path no route matches for any method is chiroute.ErrNoRoute
// (the middleware answers the router's 404 itself), and a matched route's
// escaped path value reaches the key decoded, as the handler acts on it.
func TestParamChiUnrouted(t *testing.T) {
	c := &capture{f: keyfunc.Param("productID")}
	r := chi.NewRouter()
	r.Use(c.middleware)
	var seen string
	r.Post("/products/{productID}/buy", func(w http.ResponseWriter, r *http.Request) { seen = chi.URLParam(r, "productID") })

	for _, tc := range []struct {
		method, path string
		want         error
	}{{"POST", "/nope", chiroute.ErrNoRoute}, {"GET", "/products/42/buy", keyfunc.ErrSkip}, {"BREW", "/products/42/buy", keyfunc.ErrSkip}} {
		*c = capture{f: c.f}
		r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(tc.method, tc.path, nil))
		if !c.ran {
			t.Fatalf("%s %s: middleware not run", tc.method, tc.path)
		}
		wantErr(t, c.parts, c.err, tc.want)
	}

	*c = capture{f: c.f}
	r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/products/a%2Fb/buy", nil))
	wantParts(t, c.parts, c.err, "productID", "a/b")
	if seen != "a%2Fb" {
		t.Fatalf("the handler saw %q, want chi's raw a%%2Fb", seen)
	}
}

func TestParamValues(t *testing.T) {
	f := keyfunc.Param("productID")
	req := func(v string) *http.Request {
		rctx := chi.NewRouteContext()
		rctx.URLParams.Add("productID", v)
		r := httptest.NewRequest("GET", "/", nil)
		return r.WithContext(context.WithValue(r.Context(), chi.RouteCtxKey, rctx))
	}
	parts, _, err := f.HTTP(req(""))
	wantErr(t, parts, err, keyfunc.ErrMissing)
	parts, _, err = f.HTTP(req(strings.Repeat("x", keylimit.PartLen)))
	wantParts(t, parts, err, "productID", strings.Repeat("x", keylimit.PartLen))
	parts, _, err = f.HTTP(req(strings.Repeat("x", keylimit.PartLen+1)))
	wantErr(t, parts, err, errInvalid)
}

func TestParamServeMux(t *testing.T) {
	c := &capture{f: keyfunc.Param("productID")}
	mux := http.NewServeMux()
	mux.Handle("POST /products/{productID}/buy", c.middleware(http.HandlerFunc(c.handler)))
	mux.Handle("GET /files/{productID...}", c.middleware(http.HandlerFunc(c.handler)))
	mux.Handle("GET /health", c.middleware(http.HandlerFunc(c.handler)))

	mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/products/42/buy", nil))
	wantParts(t, c.parts, c.err, "productID", "42")

	*c = capture{f: c.f}
	mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/files/a/b", nil))
	wantParts(t, c.parts, c.err, "productID", "a/b")

	*c = capture{f: c.f}
	mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/files/", nil))
	wantErr(t, c.parts, c.err, keyfunc.ErrMissing)

	*c = capture{f: c.f}
	mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/health", nil))
	wantErr(t, c.parts, c.err, errNotInRoute) // the middleware wraps that route

	// Around the whole mux nothing is routed yet: a configuration error,
	// never a silent pass.
	*c = capture{f: c.f}
	whole := c.middleware(http.NewServeMux())
	whole.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/products/42/buy", nil))
	wantErr(t, c.parts, c.err, errNotRouted)
}

func TestHeader(t *testing.T) {
	f := keyfunc.Header("x-user-id")
	r := httptest.NewRequest("GET", "/", nil)
	parts, _, err := f.HTTP(r)
	wantErr(t, parts, err, keyfunc.ErrMissing)

	r.Header.Set("X-User-ID", "u7")
	parts, _, err = f.HTTP(r)
	wantParts(t, parts, err, "X-User-Id", "u7")

	r.Header.Add("X-User-ID", "u8")
	parts, _, err = f.HTTP(r)
	wantErr(t, parts, err, errInvalid)

	r.Header.Set("X-User-ID", "")
	parts, _, err = f.HTTP(r)
	wantErr(t, parts, err, keyfunc.ErrMissing)
}

func TestQuery(t *testing.T) {
	f := keyfunc.Query("productID")
	for _, tc := range []struct {
		query string
		want  string
		err   error
	}{
		{"productID=42", "42", nil},
		{"a=1&productID=4%202", "4 2", nil},
		{"", "", keyfunc.ErrMissing},
		{"productID=", "", keyfunc.ErrMissing},
		{"productID=1&productID=2", "", errInvalid},
		{"productID=1&%70roductID=2", "", errInvalid}, // the same name, escaped
		{"productid=1", "", keyfunc.ErrMissing},
		{"productID=" + strings.Repeat("9", keylimit.PartLen+1), "", errInvalid},
	} {
		parts, _, err := f.HTTP(httptest.NewRequest("GET", "/?"+tc.query, nil))
		if tc.err != nil {
			wantErr(t, parts, err, tc.err)
		} else {
			wantParts(t, parts, err, "productID", tc.want)
		}
	}
}

func TestForm(t *testing.T) {
	f := keyfunc.Form("productID")
	post := func(ct, body, query string) *http.Request {
		r := httptest.NewRequest("POST", "/?"+query, strings.NewReader(body))
		r.Header.Set("Content-Type", ct)
		return r
	}
	const urlenc = "application/x-www-form-urlencoded"

	r := post(urlenc, "productID=42&qty=1", "")
	parts, _, err := f.HTTP(r)
	wantParts(t, parts, err, "productID", "42")
	if r.PostForm.Get("qty") != "1" {
		t.Fatalf("handler would not find the parsed form: %v", r.PostForm)
	}

	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	mw.WriteField("productID", "43")
	mw.Close()
	parts, _, err = f.HTTP(post(mw.FormDataContentType(), mp.String(), ""))
	wantParts(t, parts, err, "productID", "43")

	parts, _, err = f.HTTP(post(urlenc, "", "productID=44"))
	wantParts(t, parts, err, "productID", "44")

	parts, _, err = f.HTTP(post(urlenc, "productID=1", "productID=2"))
	wantErr(t, parts, err, errInvalid)

	parts, _, err = f.HTTP(post(urlenc, "qty=1", ""))
	wantErr(t, parts, err, keyfunc.ErrMissing)

	parts, _, err = f.HTTP(post("multipart/form-data; boundary=x", "garbage", ""))
	wantErr(t, parts, err, errInvalid)

	big := post(urlenc, "productID=1&pad="+strings.Repeat("a", 2000), "")
	big.Body = http.MaxBytesReader(httptest.NewRecorder(), big.Body, 100)
	parts, _, err = f.HTTP(big)
	wantErr(t, parts, err, keyfunc.ErrTooLarge)
}

func TestJSON(t *testing.T) {
	for _, tc := range []struct {
		path, body string
		want       string
		err        error
	}{
		{"product_id", `{"product_id":"42"}`, "42", nil},
		{"product_id", `{"product_id":42}`, "42", nil},
		{"product_id", `{"product_id":42.0}`, "42", nil},
		{"product_id", `{"product_id":4.2e1}`, "42", nil},
		{"product_id", `{"product_id":-0}`, "0", nil},
		{"product_id", `{"product_id":0.5}`, "0.5", nil},
		{"product_id", `{"product_id":18446744073709551615}`, "18446744073709551615", nil},
		{"product_id", `{"product_id":true}`, "true", nil},
		{"product_id", `{"Product_ID":"42"}`, "42", nil}, // as encoding/json fills a struct
		{"order.user_id", `{"x":[1,{"a":2}],"order":{"id":1,"user_id":"u7"},"y":null}`, "u7", nil},
		{"items.1.sku", `{"items":[{"sku":"a"},{"sku":"b"}]}`, "b", nil},
		{"product_id", `{"product_id":"42","PRODUCT_ID":"43"}`, "", errInvalid},
		{"product_id", `{"product_id":"42","product_id":"42"}`, "", errInvalid},
		{"order.user_id", `{"order":{"user_id":"u7"},"order":{"user_id":"u8"}}`, "", errInvalid},
		{"product_id", `{"product_id":{"id":1}}`, "", errInvalid},
		{"product_id", `{"product_id":[1]}`, "", errInvalid},
		{"product_id", `{"product_id":null}`, "", keyfunc.ErrMissing},
		{"product_id", `{"product_id":""}`, "", keyfunc.ErrMissing},
		{"product_id", `{"other":"42"}`, "", keyfunc.ErrMissing},
		{"product_id", `[{"product_id":"42"}]`, "", keyfunc.ErrMissing},
		{"order.user_id", `{"order":"u7"}`, "", keyfunc.ErrMissing},
		{"items.5.sku", `{"items":[{"sku":"a"}]}`, "", keyfunc.ErrMissing},
		{"product_id", ``, "", keyfunc.ErrMissing},
		{"product_id", `{"product_id":"42"`, "", errInvalid},
		{"product_id", `{"product_id" "42"}`, "", errInvalid},
		{"product_id", `not json`, "", errInvalid},
		{"product_id", `{"product_id":"` + strings.Repeat("x", keylimit.PartLen+1) + `"}`, "", errInvalid},
	} {
		t.Run(tc.body, func(t *testing.T) {
			c := &capture{f: keyfunc.JSON(tc.path)}
			r := chi.NewRouter()
			r.Use(c.middleware)
			r.Post("/", c.handler)
			var body io.Reader = strings.NewReader(tc.body)
			if tc.body == "" {
				body = nil
			}
			r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/", body))
			if tc.err != nil {
				wantErr(t, c.parts, c.err, tc.err)
			} else {
				wantParts(t, c.parts, c.err, tc.path, tc.want)
			}
			if c.body != tc.body {
				t.Fatalf("handler read %q, want the whole body %q", c.body, tc.body)
			}
		})
	}
}

func TestJSONBody(t *testing.T) {
	// Two JSON fields of one body: the body is read once, and the handler
	// still reads all of it.
	f := keyfunc.Join(keyfunc.JSON("a"), keyfunc.JSON("b"))
	body := `{"a":"1","b":2}`
	r := httptest.NewRequest("POST", "/", strings.NewReader(body))
	parts, _, err := f.HTTP(r)
	wantParts(t, parts, err, "a", "1", "b", "2")
	got, _ := io.ReadAll(r.Body)
	if string(got) != body {
		t.Fatalf("body = %q", got)
	}
	if err := r.Body.Close(); err != nil {
		t.Fatal(err)
	}

	// The limit counts the whole body, not only the part up to the field.
	limited := keyfunc.JSONLimit("a", 16)
	r = httptest.NewRequest("POST", "/", strings.NewReader(`{"a":"1","pad":"xxxxxxxxxxxxxxxxx"}`))
	parts, _, err = limited.HTTP(r)
	wantErr(t, parts, err, keyfunc.ErrTooLarge)
	r = httptest.NewRequest("POST", "/", strings.NewReader(`{"a":"1"}`))
	r.ContentLength = -1 // unknown length: the limit is enforced while reading
	parts, _, err = limited.HTTP(r)
	wantParts(t, parts, err, "a", "1")
}

type userID struct{}

type stringer struct{ s string }

func (s *stringer) String() string { return s.s }

func TestContext(t *testing.T) {
	f := keyfunc.Context("user", userID{})
	for _, tc := range []struct {
		v    any
		want string
		err  error
	}{
		{"u7", "u7", nil},
		{42, "42", nil},
		{int64(-3), "-3", nil},
		{uint64(1 << 63), "9223372036854775808", nil},
		{[]byte("b"), "b", nil},
		{&stringer{"s"}, "s", nil},
		{(*stringer)(nil), "", keyfunc.ErrMissing},
		{nil, "", keyfunc.ErrMissing},
		{"", "", keyfunc.ErrMissing},
		{3.5, "", errInvalid},
	} {
		ctx := context.Background()
		if tc.v != nil {
			ctx = context.WithValue(ctx, userID{}, tc.v)
		}
		r := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
		parts, _, err := f.HTTP(r)
		rparts, rerr := f.RPC(ctx, nil)
		if tc.err != nil {
			wantErr(t, parts, err, tc.err)
			wantErr(t, rparts, rerr, tc.err)
		} else {
			wantParts(t, parts, err, "user", tc.want)
			wantParts(t, rparts, rerr, "user", tc.want)
		}
	}
}

func TestJoinAs(t *testing.T) {
	r := httptest.NewRequest("GET", "/?q=3", nil)
	r.Header.Set("X-A", "1")
	r.Header.Set("X-B", "2")
	a, b, q := keyfunc.Header("X-A"), keyfunc.Header("X-B"), keyfunc.Query("q")

	parts, _, err := keyfunc.Join(a, b).HTTP(r)
	wantParts(t, parts, err, "X-A", "1", "X-B", "2")
	parts, _, err = keyfunc.Join(a, b).As("ab").HTTP(r)
	wantParts(t, parts, err, "ab", "1", "2")
	parts, _, err = keyfunc.Join(a.As("first"), keyfunc.Join(b, q)).HTTP(r)
	wantParts(t, parts, err, "first", "1", "X-B", "2", "q", "3")

	// The first failing source is the one named.
	parts, _, err = keyfunc.Join(a, keyfunc.Header("X-Missing"), b).HTTP(r)
	wantErr(t, parts, err, keyfunc.ErrMissing)
	if !strings.Contains(err.Error(), "Header(X-Missing)") {
		t.Fatalf("error %q does not name the source", err)
	}

	if got := keyfunc.Join(a, b).As("ab").String(); got != "Join(Header(X-A), Header(X-B)).As(ab)" {
		t.Fatalf("String() = %q", got)
	}
	if got := a.String(); got != "Header(X-A)" {
		t.Fatalf("String() = %q", got)
	}
}

func TestProtocols(t *testing.T) {
	h := keyfunc.Custom(keyfunc.Source{Name: "h", HTTP: func(r *http.Request) (string, error) { return r.Method, nil }})
	g := keyfunc.Custom(keyfunc.Source{Name: "g", RPC: func(ctx context.Context, req any) (string, error) { return fmt.Sprint(req), nil }})
	c := keyfunc.Context("c", userID{})
	v := keyview.Of[keyfunc.Func]()
	switch {
	case !v.ForHTTP(h) || v.ForRPC(h), v.ForHTTP(g) || !v.ForRPC(g), !v.ForHTTP(c) || !v.ForRPC(c):
		t.Fatal("ForHTTP/ForRPC wrong")
	case v.ForRPC(keyfunc.Join(h, c)), !v.ForHTTP(keyfunc.Join(h, c)), v.ForHTTP(keyfunc.Func{}):
		t.Fatal("ForHTTP/ForRPC of Join wrong")
	}
	parts, _, err := g.HTTP(httptest.NewRequest("GET", "/", nil))
	wantErr(t, parts, err, errInvalid)
	parts, err = g.RPC(context.Background(), 5)
	wantParts(t, parts, err, "g", "5")
	parts, _, err = (keyfunc.Func{}).HTTP(httptest.NewRequest("GET", "/", nil))
	wantErr(t, parts, err, errInvalid)

	// A custom function's error keeps its identity and its category.
	errNoUser := fmt.Errorf("%w: no user", keyfunc.ErrMissing)
	u := keyfunc.Custom(keyfunc.Source{Name: "user", HTTP: func(*http.Request) (string, error) { return "", errNoUser }})
	parts, _, err = u.HTTP(httptest.NewRequest("GET", "/", nil))
	wantErr(t, parts, err, errNoUser)
	if public(err) != "Custom(user): missing" || !errors.Is(err, lockcore.ErrInvalidKey) {
		t.Fatalf("Public() of %v wrong", err)
	}
}

// publicErr is an error of a custom source that says itself what the
// client may be told.
type publicErr struct{ error }

func (publicErr) Public() string { return "no account" }

// TestCustom: a source's description and what its errors tell the client,
// and whether it reads the message of a gRPC call.
func TestCustom(t *testing.T) {
	fail := func(err error) keyfunc.Func {
		return keyfunc.Custom(keyfunc.Source{Name: "acct", Desc: "Account()", RPC: func(context.Context, any) (string, error) { return "", err }})
	}
	for _, tc := range []struct {
		err    error
		public string
	}{
		{publicErr{fmt.Errorf("%w: secret-7f3a", keyfunc.ErrMissing)}, "Account(): no account"},
		{fmt.Errorf("lookup: %w", publicErr{lockcore.ErrInvalidKey}), "Account(): no account"},
		{fmt.Errorf("%w: secret-7f3a", keyfunc.ErrMissing), "Account(): missing"},
		{fmt.Errorf("%w: secret-7f3a", keyfunc.ErrTooLarge), "Account(): request body too large"},
		{fmt.Errorf("%w: secret-7f3a", lockcore.ErrInvalidKey), "Account(): invalid"},
		{errors.New("secret-7f3a"), "Account(): invalid"},
	} {
		parts, err := fail(tc.err).RPC(context.Background(), nil)
		wantErr(t, parts, err, tc.err)
		if public(err) != tc.public {
			t.Errorf("%v: Public() wrong, want %q", err, tc.public)
		}
	}

	rpc := func(context.Context, any) (string, error) { return "v", nil }
	h := keyfunc.Custom(keyfunc.Source{Name: "h", HTTP: func(*http.Request) (string, error) { return "v", nil }})
	msg := keyfunc.Custom(keyfunc.Source{Name: "m", RPC: rpc})
	md := keyfunc.Custom(keyfunc.Source{Name: "d", RPC: rpc, BeforeMessage: true})
	reads := keyview.Of[keyfunc.Func]().ReadsMessage
	switch {
	case reads(h), !reads(msg), reads(md), !reads(keyfunc.Join(md, msg)):
		t.Fatal("ReadsMessage wrong")
	case msg.String() != "Custom(m)", fail(nil).String() != "Account()":
		t.Fatalf("String() = %q, %q", msg.String(), fail(nil).String())
	}
	parts, err := keyfunc.Join(md, msg).As("both").RPC(context.Background(), nil)
	wantParts(t, parts, err, "both", "v", "v")
}

// TestErrorsHideValues: no error text, and no Public text, repeats the
// request's value.
func TestErrorsHideValues(t *testing.T) {
	const secret = "SECRET-VALUE-7f3a"
	long := secret + strings.Repeat("x", keylimit.PartLen)
	cases := []struct {
		f keyfunc.Func
		r *http.Request
	}{
		{keyfunc.Header("X"), func() *http.Request {
			r := httptest.NewRequest("GET", "/", nil)
			r.Header.Add("X", secret)
			r.Header.Add("X", secret)
			return r
		}()},
		{keyfunc.Header("X"), func() *http.Request {
			r := httptest.NewRequest("GET", "/", nil)
			r.Header.Set("X", long)
			return r
		}()},
		{keyfunc.Query("q"), httptest.NewRequest("GET", "/?q="+long, nil)},
		{keyfunc.JSON("a"), httptest.NewRequest("POST", "/", strings.NewReader(`{"a":{"`+secret+`":1}}`))},
		{keyfunc.JSON("a"), httptest.NewRequest("POST", "/", strings.NewReader(`{"a":"`+secret+``))},
	}
	for i, tc := range cases {
		_, _, err := tc.f.HTTP(tc.r)
		pub := public(err)
		if pub == "" {
			t.Fatalf("case %d: err = %v, want one with Public()", i, err)
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(pub, secret) {
			t.Fatalf("case %d: error %q / %q repeats the value", i, err, pub)
		}
	}
}

func TestConstructionPanics(t *testing.T) {
	long := strings.Repeat("n", keylimit.PartLen+1)
	for name, fn := range map[string]func(){
		"Param empty":     func() { keyfunc.Param("") },
		"Header long":     func() { keyfunc.Header(long) },
		"JSON empty seg":  func() { keyfunc.JSON("a..b") },
		"JSONLimit zero":  func() { keyfunc.JSONLimit("a", 0) },
		"Context nil key": func() { keyfunc.Context("u", nil) },
		"Join none":       func() { keyfunc.Join() },
		"Join zero":       func() { keyfunc.Join(keyfunc.Func{}) },
		"Join too many": func() {
			keyfunc.Join(keyfunc.Query("a"), keyfunc.Query("b"), keyfunc.Query("c"), keyfunc.Query("d"), keyfunc.Query("e"))
		},
		"As empty":       func() { keyfunc.Query("a").As("") },
		"As zero":        func() { keyfunc.Func{}.As("x") },
		"Custom no func": func() { keyfunc.Custom(keyfunc.Source{Name: "x"}) },
		"Custom empty name": func() {
			keyfunc.Custom(keyfunc.Source{HTTP: func(*http.Request) (string, error) { return "", nil }})
		},
		"Custom long name": func() {
			keyfunc.Custom(keyfunc.Source{Name: long, RPC: func(context.Context, any) (string, error) { return "", nil }})
		},
	} {
		func() {
			defer func() {
				if r := recover(); r == nil {
					t.Errorf("%s: no panic", name)
				} else if !strings.HasPrefix(fmt.Sprint(r), "routelock: keyfunc.") {
					t.Errorf("%s: panic %q does not start with routelock: keyfunc.", name, r)
				}
			}()
			fn()
		}()
	}
	// Four sources fit keylimit.Parts.
	q := keyfunc.Query("q")
	keyfunc.Join(q, q, q, q)
}

// TestKeyLimitsAgree: keyfunc's limits are lockcore's. The largest key a
// key function yields, keylimit.Parts parts of
// keylimit.PartLen bytes each (bytes that escaping triples), is a
// valid lockcore.Key; a value one byte longer, or a source more, is refused
// by keyfunc itself, as lockcore would refuse it.
func TestKeyLimitsAgree(t *testing.T) {
	value := strings.Repeat(":", keylimit.PartLen)
	q := url.Values{}
	var fs []keyfunc.Func
	for i := 0; i < keylimit.Parts/2; i++ {
		name := fmt.Sprintf("%0*d", keylimit.PartLen, i)
		q.Set(name, value)
		fs = append(fs, keyfunc.Query(name))
	}
	f := keyfunc.Join(fs...)
	parts, _, err := f.HTTP(httptest.NewRequest("GET", "/?"+q.Encode(), nil))
	if err != nil || len(parts) != keylimit.Parts {
		t.Fatalf("at the limits: %d parts, %v", len(parts), err)
	}
	if _, err := lockcore.NewKey(parts...); err != nil {
		t.Fatalf("lockcore refuses the largest key keyfunc yields: %v", err)
	}

	q.Set(fmt.Sprintf("%0*d", keylimit.PartLen, 0), value+"x")
	parts, _, err = f.HTTP(httptest.NewRequest("GET", "/?"+q.Encode(), nil))
	wantErr(t, parts, err, errInvalid)
	if _, err := lockcore.NewKey(value + "x"); !errors.Is(err, lockcore.ErrInvalidKey) {
		t.Fatalf("lockcore: a part of %d bytes: %v", keylimit.PartLen+1, err)
	}
	if _, err := lockcore.NewKey(strings.Split(strings.Repeat("x", keylimit.Parts+1), "")...); !errors.Is(err, lockcore.ErrInvalidKey) {
		t.Fatalf("lockcore: %d parts: %v", keylimit.Parts+1, err)
	}
	defer func() {
		if recover() == nil {
			t.Errorf("Join to %d parts: no panic", keylimit.Parts+2)
		}
	}()
	keyfunc.Join(f, keyfunc.Query("one more"))
}

// TestParamDecodes: a parameter chi took from the percent-encoded path is
// decoded, in a router's r.Use and on a route alike, once: a segment that
// decodes to a percent sign stays one, and one that does not decode is
// invalid.
func TestParamDecodes(t *testing.T) {
	for _, top := range []bool{true, false} {
		c := &capture{f: keyfunc.Param("productID")}
		r := chi.NewRouter()
		h := func(http.ResponseWriter, *http.Request) {}
		if top {
			r.Use(c.middleware)
			r.Post("/products/{productID}/buy", h)
		} else {
			r.With(c.middleware).Post("/products/{productID}/buy", h)
		}
		for _, tc := range []struct{ target, want string }{
			{"/products/%34%32/buy", "42"},
			{"/products/%2534/buy", "%34"},
			{"/products/%34%2534/buy", "4%34"},
		} {
			*c = capture{f: c.f}
			r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", tc.target, nil))
			wantParts(t, c.parts, c.err, "productID", tc.want)
		}
		req := httptest.NewRequest("POST", "/products/x/buy", nil)
		req.URL.RawPath = "/products/%zz/buy" // as chi would route a path that does not decode
		*c = capture{f: c.f}
		r.ServeHTTP(httptest.NewRecorder(), req)
		wantErr(t, c.parts, c.err, errInvalid)
	}
}

// TestHTTPRoute: HTTP returns the template of the route a source matched
// because the router had not (Param in a router's r.Use), and "" where the
// router had matched it already, where no source matches routes, and with
// an error.
func TestHTTPRoute(t *testing.T) {
	var route string
	var err error
	var f keyfunc.Func
	mw := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, route, err = f.HTTP(r)
			next.ServeHTTP(w, r)
		})
	}
	h := func(http.ResponseWriter, *http.Request) {}
	top := chi.NewRouter()
	top.Use(mw)
	top.Post("/products/{productID}/buy", h)
	top.Get("/health", h)
	with := chi.NewRouter()
	with.With(mw).Post("/products/{productID}/buy", h)
	for _, tc := range []struct {
		name   string
		router http.Handler
		f      keyfunc.Func
		method string
		path   string
		want   string
	}{
		{"Use", top, keyfunc.Param("productID"), "POST", "/products/42/buy", "/products/{productID}/buy"},
		{"Use, joined", top, keyfunc.Join(keyfunc.Query("q"), keyfunc.Param("productID")), "POST", "/products/42/buy?q=1", "/products/{productID}/buy"},
		{"Use, Query", top, keyfunc.Query("q"), "POST", "/products/42/buy?q=1", ""},
		{"Use, skipped", top, keyfunc.Param("productID"), "GET", "/health", ""},
		{"With", with, keyfunc.Param("productID"), "POST", "/products/42/buy", ""},
	} {
		f, route, err = tc.f, "unset", nil
		tc.router.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(tc.method, tc.path, nil))
		if route != tc.want {
			t.Errorf("%s: route %q (err %v), want %q", tc.name, route, err, tc.want)
		}
	}
}
