package middleware_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/routelock/lock/internal/enginetest"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/middleware"
)

// TestCheckFindsWhatRequestsWouldMeet: for routers built every way chi
// builds them, middleware.Check names exactly the routes whose requests
// the lock refuses with 500 for a parameter their pattern lacks: each
// route is also requested, and a route gets 500 if and only if Check named
// it.
func TestCheckFindsWhatRequestsWouldMeet(t *testing.T) {
	e := enginetest.New()
	byParam := func(name string) func(http.Handler) http.Handler {
		return middleware.Lock(e, middleware.Config{Key: keyfunc.Param(name)})
	}
	ok := func(w http.ResponseWriter, _ *http.Request) {}
	for _, tc := range []struct {
		name  string
		build func(r chi.Router)
		calls []checkCall
		bad   []string // what Check's error names, one entry per problem
	}{
		{"With, spelt right", func(r chi.Router) {
			r.With(byParam("productID")).Post("/products/{productID}/buy", ok)
		}, []checkCall{{"POST", "/products/7/buy"}}, nil},
		{"With, misspelt", func(r chi.Router) {
			r.With(byParam("productId")).Post("/products/{productID}/buy", ok)
			r.With(byParam("productID")).Post("/products/{productID}/refund", ok)
		}, []checkCall{{"POST", "/products/7/buy"}, {"POST", "/products/7/refund"}}, []string{"POST /products/{productID}/buy"}},
		{"Group, one route lacks it", func(r chi.Router) {
			r.Group(func(r chi.Router) {
				r.Use(byParam("productID"))
				r.Post("/products/{productID:[0-9]+}/buy", ok)
				r.Post("/carts/{cartID}/buy", ok)
			})
		}, []checkCall{{"POST", "/products/7/buy"}, {"POST", "/carts/7/buy"}}, []string{"POST /carts/{cartID}/buy"}},
		{"router-wide, some routes have it", func(r chi.Router) {
			r.Use(byParam("productID"))
			r.Get("/health", ok)
			r.Post("/products/{productID}/buy", ok)
		}, []checkCall{{"GET", "/health"}, {"POST", "/products/7/buy"}}, nil},
		{"router-wide, no route has it", func(r chi.Router) {
			r.Use(byParam("productId"))
			r.Get("/health", ok)
			r.Post("/products/{productID}/buy", ok)
		}, []checkCall{{"GET", "/health"}, {"POST", "/products/7/buy"}}, []string{`router-wide lock under "/"`}},
		{"Route, the parameter in the mount's pattern", func(r chi.Router) {
			r.Route("/products/{productID}", func(r chi.Router) {
				r.Use(byParam("productID"))
				r.Post("/buy", ok)
				r.With(byParam("productID")).Post("/refund", ok)
			})
		}, []checkCall{{"POST", "/products/7/buy"}, {"POST", "/products/7/refund"}}, nil},
		{"Route, misspelt inside", func(r chi.Router) {
			r.Route("/products/{productID}", func(r chi.Router) {
				r.Use(byParam("product"))
				r.Post("/buy", ok)
			})
		}, []checkCall{{"POST", "/products/7/buy"}}, []string{`router-wide lock under "/products/{productID}/"`}},
		{"With before Mount", func(r chi.Router) {
			sub := chi.NewRouter()
			sub.Post("/{orderID}/pay", ok)
			r.With(byParam("orderId")).Mount("/orders", sub)
		}, []checkCall{{"POST", "/orders/9/pay"}}, []string{`router-wide lock under "/orders/"`}},
		{"a lock of other methods only", func(r chi.Router) {
			r.With(middleware.Lock(e, middleware.Config{Key: keyfunc.Param("productID"), Methods: []string{"POST"}})).
				Get("/carts/{cartID}", ok)
		}, []checkCall{{"GET", "/carts/3"}}, nil},
		{"several resources", func(r chi.Router) {
			r.With(middleware.Lock(e, middleware.Config{Key: keyfunc.Param("productID").Also(keyfunc.Param("userId"))})).
				Post("/users/{userID}/products/{productID}/buy", ok)
		}, []checkCall{{"POST", "/users/1/products/7/buy"}}, []string{"POST /users/{userID}/products/{productID}/buy", "{userId}"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := chi.NewRouter()
			tc.build(r)
			err := middleware.Check(r)
			if len(tc.bad) == 0 {
				if err != nil {
					t.Fatalf("Check: %v, want nil", err)
				}
			} else {
				if !errors.Is(err, lockcore.ErrMisconfigured) {
					t.Fatalf("Check: %v, want ErrMisconfigured", err)
				}
				for _, want := range tc.bad {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("Check's error lacks %q:\n%v", want, err)
					}
				}
			}
			for _, c := range tc.calls {
				rec := httptest.NewRecorder()
				r.ServeHTTP(rec, httptest.NewRequest(c.method, c.path, nil))
				named := err != nil && slices.ContainsFunc(strings.Split(err.Error(), "\n"), func(line string) bool {
					return strings.Contains(line, c.method+" ") && routeOf(r, c) != "" && strings.Contains(line, routeOf(r, c)) ||
						strings.Contains(line, "router-wide")
				})
				if got500 := rec.Code == http.StatusInternalServerError; got500 != named {
					t.Errorf("%s %s: status %d, and Check named it: %v (%v)", c.method, c.path, rec.Code, named, err)
				}
			}
		})
	}
}

// routeOf returns the pattern of the route of r that c matches.
func routeOf(r chi.Routes, c checkCall) string {
	rctx := chi.NewRouteContext()
	if !r.Match(rctx, c.method, c.path) {
		return ""
	}
	return rctx.RoutePattern()
}

// checkCall is a request of TestCheckFindsWhatRequestsWouldMeet.
type checkCall struct{ method, path string }
