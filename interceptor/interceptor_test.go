package interceptor_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/routelock/lock/interceptor"
	"github.com/routelock/lock/internal/classifytest"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/locktest"
)

func TestStatus(t *testing.T) {
	for _, tc := range []struct {
		err   error
		code  codes.Code
		msg   string
		retry time.Duration
	}{
		{classifytest.KeyError("Field(id)", keyfunc.ErrMissing), codes.InvalidArgument, "routelock: invalid lock key: Field(id): missing", 0},
		{classifytest.KeyError("Metadata(x)", lockcore.ErrInvalidKey), codes.InvalidArgument, "routelock: invalid lock key: Metadata(x): invalid", 0},
		{fmt.Errorf("%w: too many parts", lockcore.ErrInvalidKey), codes.InvalidArgument, "routelock: invalid lock key", 0},
		{fmt.Errorf("%w: short", lockcore.ErrInvalidToken), codes.InvalidArgument, "routelock: invalid routelock-token metadata", 0},
		{classifytest.KeyError("Field(id)", keyfunc.ErrSkip), codes.Internal, "routelock: the lock configuration of this method is wrong: its key Field(id): invalid", 0},
		{&lockcore.ContentionError{Key: "k", RetryAfter: 1500 * time.Millisecond}, codes.Aborted, "routelock: resource busy, retry later", 1500 * time.Millisecond},
		{&lockcore.ContentionError{Key: "k"}, codes.Aborted, "routelock: resource busy, retry later", 0},
		{errors.Join(&lockcore.ContentionError{Key: "k"}, context.Canceled), codes.Canceled, "routelock: call cancelled while waiting for the lock", 0},
		{errors.Join(&lockcore.ContentionError{Key: "k"}, context.DeadlineExceeded), codes.DeadlineExceeded, "routelock: deadline exceeded while waiting for the lock", 0},
		{fmt.Errorf("%w: dial tcp 127.0.0.1:6379: refused", lockcore.ErrUnavailable), codes.Unavailable, "routelock: lock service unavailable", 0},
		{lockcore.ErrClosed, codes.Unavailable, "routelock: lock service unavailable", 0},
		{errors.New("something else"), codes.Internal, "routelock: internal error", 0},
	} {
		s, ok := status.FromError(interceptor.Status(tc.err))
		if !ok || s.Code() != tc.code || s.Message() != tc.msg {
			t.Errorf("Status(%v) = %v %q, want %v %q", tc.err, s.Code(), s.Message(), tc.code, tc.msg)
		}
		var retry time.Duration
		for _, d := range s.Details() {
			if r, ok := d.(*errdetails.RetryInfo); ok {
				retry = r.RetryDelay.AsDuration()
			}
		}
		if retry != tc.retry {
			t.Errorf("Status(%v) RetryInfo %v, want %v", tc.err, retry, tc.retry)
		}
		for _, leak := range []string{"127.0.0.1", "dial", "something else"} {
			if strings.Contains(s.Message(), leak) {
				t.Errorf("Status(%v) leaks %q", tc.err, leak)
			}
		}
	}
}

// TestUnaryClient: the owner token of the context goes out as exactly one
// routelock-token entry, replacing a stale one; no token, no entry.
func TestUnaryClient(t *testing.T) {
	var got metadata.MD
	invoker := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		got, _ = metadata.FromOutgoingContext(ctx)
		return nil
	}
	ic := interceptor.UnaryClient()
	tok := lifecycle.NewToken()
	ctx, err := lifecycle.Intake(context.Background(), "routelock-token", []string{tok}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want []string
	}{
		{"no token", context.Background(), nil},
		{"token", ctx, []string{tok}},
		{"other metadata kept", metadata.AppendToOutgoingContext(ctx, "x-a", "1"), []string{tok}},
		{"stale token replaced", metadata.AppendToOutgoingContext(ctx, "routelock-token", "old", "routelock-token", "older"), []string{tok}},
		{"same token once", metadata.AppendToOutgoingContext(ctx, "routelock-token", tok), []string{tok}},
	} {
		got = nil
		if err := ic(tc.ctx, "/s/M", nil, nil, nil, invoker); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got["routelock-token"]) != fmt.Sprint(tc.want) {
			t.Errorf("%s: sent %q, want %q", tc.name, got["routelock-token"], tc.want)
		}
		if tc.name == "other metadata kept" && len(got["x-a"]) != 1 {
			t.Errorf("%s: lost x-a", tc.name)
		}
	}
	var streamed metadata.MD
	streamer := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		streamed, _ = metadata.FromOutgoingContext(ctx)
		return nil, nil
	}
	if _, err := interceptor.StreamClient()(ctx, nil, nil, "/s/M", streamer); err != nil || len(streamed["routelock-token"]) != 1 {
		t.Fatalf("StreamClient sent %v", streamed)
	}
}

func TestConfigValidate(t *testing.T) {
	key := interceptor.Field("id")
	for _, tc := range []struct {
		c  interceptor.Config
		ok bool
	}{
		{interceptor.Config{}, true},
		{interceptor.Config{Rules: []interceptor.Rule{{Method: "/a.B/C", Key: key}, {Method: "/a.B/*", Key: key}, {Method: "*", Key: key}}}, true},
		{interceptor.Config{Rules: []interceptor.Rule{{Method: "/a.B/C", Key: key}, {Method: "/a.B/C", Key: key}}}, false},
		{interceptor.Config{Rules: []interceptor.Rule{{Method: "a.B/C", Key: key}}}, false},
		{interceptor.Config{Rules: []interceptor.Rule{{Method: "/a.B/", Key: key}}}, false},
		{interceptor.Config{Rules: []interceptor.Rule{{Method: "/a.B/C/D", Key: key}}}, false},
		{interceptor.Config{Rules: []interceptor.Rule{{Method: "//C", Key: key}}}, false},
		{interceptor.Config{Rules: []interceptor.Rule{{Method: "/a.*/C", Key: key}}}, false},
		{interceptor.Config{Rules: []interceptor.Rule{{Method: "", Key: key}}}, false},
		{interceptor.Config{Rules: []interceptor.Rule{{Method: "/a.B/C"}}}, false},
		{interceptor.Config{Rules: []interceptor.Rule{{Method: "/a.B/C", Key: keyfunc.Header("x")}}}, false},
		{interceptor.Config{Rules: []interceptor.Rule{{Method: "/a.B/C", Key: key, Policy: lifecycle.Policy{TTL: time.Millisecond}}}}, false},
		{interceptor.Config{Rules: []interceptor.Rule{{Method: "/a.B/C", Key: key, Policy: lifecycle.Policy{TTL: -1}}}}, false},
	} {
		panicked := func() (p bool) {
			defer func() { p = recover() != nil }()
			interceptor.UnaryServer(lifecycle.Serve(new(locktest.Engine), nil), tc.c)
			return false
		}()
		if panicked == tc.ok {
			t.Errorf("UnaryServer(%+v): panicked %v, want %v", tc.c.Rules, panicked, !tc.ok)
		}
	}
}
