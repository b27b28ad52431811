package quorumengine

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/examples/grpc/shoppb"
	"github.com/routelock/lock/interceptor"
	"github.com/routelock/lock/lockotel"
)

// inventory is a Reserve handler that checks, from inside, that no two
// calls for a product overlap and that their fencing tokens rise.
type inventory struct {
	shoppb.UnimplementedInventoryServer
	inside   atomic.Int64
	overlaps atomic.Int64
	mu       sync.Mutex
	last     int64
	disorder int
	calls    int
}

func (inv *inventory) Reserve(ctx context.Context, req *shoppb.ReserveRequest) (*shoppb.ReserveReply, error) {
	if inv.inside.Add(1) != 1 && ctx.Err() == nil {
		inv.overlaps.Add(1)
	}
	defer inv.inside.Add(-1)
	fence, ok := lock.FencingToken(ctx)
	inv.mu.Lock()
	if !ok || fence <= inv.last {
		inv.disorder++
	}
	inv.last = fence
	inv.calls++
	inv.mu.Unlock()
	return &shoppb.ReserveReply{Fence: fence}, nil
}

// TestGRPCAndTelemetry serves a gRPC method through the interceptor on a
// Locker of this engine on three masters, observed by lockotel, on
// loopback: 8 clients call it 10 times each for one product; the handler
// sees every call alone, with a rising fencing token, and the meter counts
// every acquisition.
func TestGRPCAndTelemetry(t *testing.T) {
	e := newEngine(t, masters(t, 3), Options{Prefix: "grpc:", TTL: 2 * time.Second})
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	l := lock.FromEngine(e, lock.Observe(lockotel.New(lockotel.Config{MeterProvider: mp})))

	inv := &inventory{}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(interceptor.UnaryServer(l, interceptor.Config{Rules: []interceptor.Rule{
		interceptor.Method(shoppb.Inventory_Reserve_FullMethodName, interceptor.Field("product_id").As("productID"), lock.Wait(20*time.Second)),
	}})))
	shoppb.RegisterInventoryServer(srv, inv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	client := shoppb.NewInventoryClient(conn)

	const clients, calls = 8, 10
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, clients)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range calls {
				if _, err := client.Reserve(ctx, &shoppb.ReserveRequest{ProductId: 42, Quantity: 1}); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if inv.calls != clients*calls || inv.overlaps.Load() != 0 || inv.disorder != 0 {
		t.Fatalf("%d calls (want %d), %d overlaps, %d fences not rising", inv.calls, clients*calls, inv.overlaps.Load(), inv.disorder)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	var acquisitions uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == "routelock.acquire.duration" {
				for _, dp := range h.DataPoints {
					acquisitions += dp.Count
				}
			}
		}
	}
	if acquisitions != clients*calls {
		t.Errorf("routelock.acquire.duration counted %d acquisitions, want %d", acquisitions, clients*calls)
	}
}
