package keyfunc

import (
	"context"
	"errors"
	"testing"

	// Field and Metadata read gRPC calls through the hooks that protoread
	// sets, as package interceptor links it into gRPC servers. This import
	// gives them to the tests of this package, in-package and external;
	// protoread does not import keyfunc, so there is no cycle.
	_ "github.com/routelock/lock/internal/protoread"
	"github.com/routelock/lock/internal/rpckey"
)

// TestNoReader: in a program that does not link the reader, Field and
// Metadata fail every call with ErrInvalid and a message that says why. It
// replaces the hooks, so it must not run in parallel.
func TestNoReader(t *testing.T) {
	if rpckey.Field == nil || rpckey.Metadata == nil {
		t.Fatal("hooks not set although protoread is linked")
	}
	field, md := rpckey.Field, rpckey.Metadata
	t.Cleanup(func() { rpckey.Field, rpckey.Metadata = field, md })
	rpckey.Field, rpckey.Metadata = nil, nil

	const why = ": reads gRPC calls through package github.com/routelock/lock/interceptor, which this program does not link"
	for _, f := range []Func{Field("product_id"), Metadata("X-Tenant"), Join(Metadata("x-tenant"), Field("product_id"))} {
		parts, err := f.RPC(context.Background(), nil)
		var kerr *Error
		if parts != nil || !errors.Is(err, ErrInvalid) || !errors.As(err, &kerr) {
			t.Fatalf("%v: %q, %v; want an *Error matching ErrInvalid", f, parts, err)
		}
		if want := kerr.Source + why; kerr.Public() != want {
			t.Errorf("%v: Public() = %q, want %q", f, kerr.Public(), want)
		}
	}
}
