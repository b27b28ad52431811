package lock_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

// resources is a slog.Handler that sends the resource of each record
// that names one on a channel.
type resources chan string

func (c resources) Enabled(context.Context, slog.Level) bool { return true }
func (c resources) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "resource" {
			c <- a.Value.String()
		}
		return true
	})
	return nil
}
func (c resources) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c resources) WithGroup(string) slog.Handler      { return c }

// TestLoggerNamesTheLostResourceOfSeveral: a Locker of FromEngine with a
// Logger logs the loss of one of several resources taken together
// (AcquireAll, as keyfunc.Func.Also's routes take them) under that
// resource's name, whatever the order the keys were named in, and once:
// the other resource is still held.
func TestLoggerNamesTheLostResourceOfSeveral(t *testing.T) {
	logs := make(resources, 4)
	e := new(locktest.Engine)
	locker := lock.FromEngine(e, lock.Logger(slog.New(logs)))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	user, product := key(t, "userID", "7"), key(t, "productID", "42")
	leases, err := locker.AcquireAll(ctx, []lockcore.Key{user, product}, lock.FailFast())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Revoke(ctx, product, "a test"); err != nil {
		t.Fatal(err)
	}
	var got []string
	select {
	case r := <-logs:
		got = append(got, r)
	case <-ctx.Done():
		t.Fatal("the loss was not logged")
	}
	// Any other line comes right after the first: the losses of one
	// revocation are logged as the contexts end, one after the other.
	for more := time.After(300 * time.Millisecond); ; {
		select {
		case r := <-logs:
			got = append(got, r)
			continue
		case <-more:
		}
		break
	}
	if len(got) != 1 || got[0] != "productID" {
		t.Errorf("the loss of productID:42, taken with userID:7, was logged under %q, want once under productID", got)
	}
	for _, ls := range leases {
		_ = ls.Release(context.Background())
	}
}
