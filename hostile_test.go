package lock_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/dynamicpb"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/interceptor"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/internal/shop"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore/redisengine"
	"github.com/routelock/lock/middleware"
)

// TestTokensNeverLeak: whatever a caller sends — the holder's token when it
// may not carry one, a forged token, a malformed one, hostile key values —
// no HTTP response (status line, headers, body), no gRPC status (message and
// details) and no log line carries an owner token or the raw value.
func TestTokensNeverLeak(t *testing.T) {
	b := redistest.Mini(t)
	prefix := redistest.Prefix(t)
	lease, _ := holdFor(t, b, prefix)
	tok := lease.Token()
	var logs bytes.Buffer
	log.SetOutput(&logs)
	defer log.SetOutput(os.Stderr)

	never := func(r *http.Request) bool { return false }
	build := func(a *app) http.Handler {
		r := chi.NewRouter()
		r.Use(middleware.Lock(a.locker, middleware.Config{Key: keyfunc.Param("productID"), Policy: lock.FailFast(), TrustToken: never}))
		r.With(middleware.Lock(a.locker, middleware.Config{Key: keyfunc.Header("X-Tenant"), Policy: lock.FailFast(), TrustToken: never})).Post("/tenant", func(http.ResponseWriter, *http.Request) {})
		r.Post("/products/{productID}/buy", func(http.ResponseWriter, *http.Request) {})
		return r
	}
	a := newApp(t, b, prefix, build)
	hc := httpClient(t, nil)
	secrets := []string{tok, lifecycle.NewToken(), "not a token \x00\r\n", strings.Repeat("Z", 300), "\xff\xfe-bad-utf8"}
	var seen []string
	for _, s := range secrets {
		for _, req := range []struct{ path, header string }{
			{"/products/42/buy", "Routelock-Token"},
			{"/tenant", "X-Tenant"},
		} {
			httpReq, _ := http.NewRequest("POST", a.srv.URL+req.path, nil)
			httpReq.Header[req.header] = []string{s}
			resp, err := hc.Do(httpReq)
			if err != nil {
				continue // net/http refuses to send some of them at all
			}
			var dump bytes.Buffer
			resp.Header.Write(&dump)
			dump.ReadFrom(resp.Body)
			resp.Body.Close()
			seen = append(seen, fmt.Sprintf("%d %s", resp.StatusCode, dump.String()))
			if resp.StatusCode == 200 && req.path == "/products/42/buy" {
				t.Errorf("token %q re-entered from a caller that may not carry one", s)
			}
		}
	}

	// gRPC: the holder's token from an untrusted caller, forged and
	// malformed tokens, and hostile metadata keys.
	l := lock.NewRedis(clientOf(t, b), redisengine.Options{Prefix: prefix}, lock.Defaults(lock.FailFast()))
	defer l.Close()
	cc := dial(t, serveGRPC(t, &shop.Server{Reserve: func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
		return shop.New("ReserveReply"), nil
	}}, grpc.ChainUnaryInterceptor(interceptor.UnaryServer(l, interceptor.Config{
		Rules: []interceptor.Rule{
			interceptor.Method(shop.Reserve, interceptor.Field("product_id").As("productID")),
			interceptor.Method(shop.Create, interceptor.Metadata("x-tenant")),
		},
		TrustToken: func(context.Context, string) bool { return false },
	}))))
	for _, s := range secrets {
		for _, md := range [][]string{{"routelock-token", s}, {"x-tenant", s}} {
			ctx := metadata.AppendToOutgoingContext(context.Background(), md...)
			method, req := shop.Reserve, any(shop.Set(shop.New("ReserveRequest"), "product_id", int64(42)))
			if md[0] == "x-tenant" {
				method, req = shop.Create, shop.New("CreateOrderRequest")
			}
			err := cc.Invoke(ctx, method, req, shop.New("ReserveReply"))
			st := status.Convert(err)
			seen = append(seen, fmt.Sprintf("%v %s %v", st.Code(), st.Message(), st.Details()))
			if err == nil && md[0] == "routelock-token" {
				t.Errorf("token %q re-entered over gRPC from a caller that may not carry one", s)
			}
		}
	}
	seen = append(seen, logs.String())
	for _, out := range seen {
		for _, s := range secrets {
			if strings.Contains(out, s) {
				t.Fatalf("%q shows up in %q", s, out)
			}
		}
	}
	if len(seen) < 10 {
		t.Fatalf("only %d answers checked", len(seen))
	}
}
