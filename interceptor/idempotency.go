package interceptor

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/routelock/lock/internal/idem"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/lockcore"
)

// IdempotencyConfig configures Idempotency. Its zero value is usable: the
// idempotency-key metadata, required, calls scoped by method only, results
// kept 24 hours, stored replies up to 1 MiB.
type IdempotencyConfig struct {
	// Metadata is the metadata key that carries the idempotency key
	// (lower case; not a -bin key). Default: "idempotency-key".
	Metadata string

	// Optional lets a call without the metadata through, unlocked and
	// unrecorded. Default: such a call fails with codes.InvalidArgument.
	Optional bool

	// Caller returns the identity of the call's caller, as the server
	// knows it (an authenticated user or tenant, never a value the client
	// may choose freely), or "" for none: the same key sent by two callers
	// names two calls. An error fails the call with codes.Unauthenticated
	// and is not shown to the client. Default: nil, every call the same
	// caller; keys are then scoped by the method alone.
	Caller func(ctx context.Context) (string, error)

	// Fingerprint returns what identifies the call's payload: a call that
	// reuses a key with another fingerprint fails with
	// codes.FailedPrecondition. Default: the full method name and the
	// request message marshalled deterministically
	// (proto.MarshalOptions{Deterministic: true}); a request that is not
	// a protobuf message then fails with codes.Internal.
	Fingerprint func(fullMethod string, req any) []byte

	// MaxStored is the most bytes of a marshalled reply (or error status)
	// that are stored. A longer reply goes out to its client, is not
	// stored, and a retry of its key fails with codes.FailedPrecondition.
	// Default: 1 MiB.
	MaxStored int

	// Keep is how long a result is kept: a key reused later is a new
	// call. Default: 24 hours.
	Keep time.Duration

	// Policy is how the key's lock is taken: how long a duplicate that
	// arrives while the first call runs waits for its result, never past
	// its deadline (lockcore.FailFast: not at all, codes.Aborted at once),
	// and the lease. Share and Segments are refused.
	Policy lifecycle.Policy

	// Logger, if set, is told when a result could not be stored. The line
	// names the method, never the key, the caller or a message. Default:
	// nil, silent.
	Logger *slog.Logger
}

// The defaults of IdempotencyConfig, and the metadata that marks a replay.
const (
	defaultIdemMetadata = "idempotency-key"
	defaultIdemMaxStore = 1 << 20
	defaultIdemKeep     = 24 * time.Hour
	replayedKey         = "idempotent-replayed"
)

// The reasons of the google.rpc.ErrorInfo details of Idempotency's
// FailedPrecondition refusals.
const (
	reasonKeyReused = "IDEMPOTENCY_KEY_REUSED"
	reasonNotStored = "REPLY_NOT_STORED"
)

// Idempotency returns a unary server interceptor that runs a call once
// per idempotency key, as package middleware's Idempotency does for HTTP:
// the first call with a key runs; a duplicate that comes while it runs
// waits for it, in line, and gets its reply; a retry after it gets the
// stored reply, with response header metadata idempotent-replayed: true.
//
//	grpc.NewServer(grpc.ChainUnaryInterceptor(interceptor.Idempotency(l, interceptor.IdempotencyConfig{})))
//
// It applies to every unary call it sees: to make some methods idempotent
// and not others, set Optional, or put it under a per-method selector
// (go-grpc-middleware's selector, for one). Chain it before UnaryServer,
// so that a replay takes no lock of the resource the call names.
//
// The key is the value of the idempotency-key metadata, one string of 1
// to 255 visible ASCII characters (a quoted Structured Field string is
// taken too, as the HTTP header's). What a call is looked up by is the key
// together with what the server knows and the client cannot forge: the
// full method name and the caller (IdempotencyConfig.Caller). Each such
// lookup key is a lock of l's engine, which must keep results
// (lockcore.Results: the Redis engine and the in-memory one of package
// locktest do); the result is stored with
// the lock's release, in one step, only while its lease is live: a call
// whose lease was lost stores nothing, and no duplicate can run between
// the handler's end and the store.
//
// The result stored is the reply, marshalled, with its message type's
// full name, or the handler's error status (code, message and details):
// an error is an answer, and its retries get it as well. An interceptor
// learns a reply's Go type only from its handler, which a replay never
// runs: a replay unmarshals the stored reply into a new message of the
// stored type, found in the global registries: protoregistry.GlobalTypes, where generated code
// registers its messages, else protoregistry.GlobalFiles, as a dynamicpb
// message; a reply type known to neither fails the replay with
// codes.Internal. The handler never runs for a replay. Metadata the
// handler sets (grpc.SetHeader, grpc.SetTrailer) is not stored.
//
// Two errors are not stored, and leave the key free for a retry to run
// the call again: an error returned once the handler's context had ended
// (the caller went away, its deadline passed, or the lease was lost: the
// handler was interrupted, its error says so and not what the call
// would have answered; and a lost lease could store nothing anyway), and
// an error of code Unavailable, which in gRPC tells the client that the
// call did not happen and may be retried as it is (retry policies resend
// it on their own: a stored Unavailable would answer every retry for the
// rest of Keep). A handler that panics stores codes.Internal, which its
// retries get, and the panic goes on up the chain.
//
// Refusals (the handler does not run) are:
//
//	InvalidArgument     no key (unless Optional), or a malformed one
//	Unauthenticated     Caller failed
//	FailedPrecondition  the key reused with another payload (a
//	                    google.rpc.ErrorInfo of reason
//	                    "IDEMPOTENCY_KEY_REUSED", domain "routelock"); or a
//	                    retry of a call whose reply was not stored, over
//	                    MaxStored or not a protobuf message (reason
//	                    "REPLY_NOT_STORED", marked as a replay)
//	Aborted             a duplicate whose wait ran out while the first runs,
//	                    with a google.rpc.RetryInfo, as a busy lock is
//	                    answered (see Status)
//	Unavailable         the engine unreachable
//	Canceled, DeadlineExceeded  the caller went away, or its deadline
//	                    passed, while waiting
//
// FailedPrecondition, not InvalidArgument, for a reused key: the message
// is valid in itself and fails only against the state the key's first
// call left. Messages name what is wrong, never the key or the payload.
//
// Panics if l's engine keeps no results, or c is invalid.
func Idempotency(l lifecycle.Locker, c IdempotencyConfig) grpc.UnaryServerInterceptor {
	return newIdempotency(l, c).unary
}

// idempotency is one configured Idempotency interceptor.
type idempotency struct {
	l      lifecycle.Locker
	c      IdempotencyConfig
	policy lifecycle.Policy
}

func newIdempotency(l lifecycle.Locker, c IdempotencyConfig) *idempotency {
	if l == nil {
		panic("routelock: interceptor.Idempotency: nil Engine")
	}
	if lifecycle.ResultsOf(l) == nil {
		panic(fmt.Sprintf("%v: interceptor.Idempotency: the engine keeps no results (lockcore.Promises.Results)", lockcore.ErrMisconfigured))
	}
	if c.Policy.Share != 0 || c.Policy.Segments != 0 {
		panic(fmt.Sprintf("%v: interceptor.IdempotencyConfig.Policy: a key's lock is exclusive and whole (no Share, no Segments)", lockcore.ErrMisconfigured))
	}
	if c.MaxStored < 0 || c.Keep < 0 {
		panic("routelock: interceptor.IdempotencyConfig: MaxStored and Keep must not be negative")
	}
	if c.Keep > 0 && c.Keep < time.Second {
		panic(fmt.Sprintf("routelock: interceptor.IdempotencyConfig: Keep %v: keep results a second at least", c.Keep))
	}
	if c.Metadata == "" {
		c.Metadata = defaultIdemMetadata
	}
	if !metadataKey(c.Metadata) {
		panic(fmt.Sprintf("routelock: interceptor.IdempotencyConfig: Metadata %q: want a lower-case metadata key, not a -bin one", c.Metadata))
	}
	p, err := lifecycle.Prepare(l, c.Policy)
	if err != nil {
		panic(fmt.Sprintf("%v (interceptor.IdempotencyConfig.Policy)", err))
	}
	if c.MaxStored == 0 {
		c.MaxStored = defaultIdemMaxStore
	}
	if c.Keep == 0 {
		c.Keep = defaultIdemKeep
	}
	return &idempotency{l: l, c: c, policy: p}
}

// metadataKey reports whether k is a key of text metadata as gRPC sends
// it: lower-case letters, digits, '-', '_' and '.', not ending in -bin,
// not starting with "grpc-".
func metadataKey(k string) bool {
	if len(k) > 4 && k[len(k)-4:] == "-bin" || len(k) >= 5 && k[:5] == "grpc-" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return k != ""
}

func (m *idempotency) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	vs := metadata.ValueFromIncomingContext(ctx, m.c.Metadata)
	if len(vs) == 0 {
		if m.c.Optional {
			return handler(ctx, req)
		}
		return nil, status.Error(codes.InvalidArgument, "routelock: this method requires "+m.c.Metadata+" metadata")
	}
	ik, ok := idem.ParseKey(vs)
	if !ok {
		return nil, status.Error(codes.InvalidArgument, "routelock: "+m.c.Metadata+" metadata must be one string of 1 to 255 visible characters")
	}
	caller := ""
	if m.c.Caller != nil {
		id, err := m.c.Caller(ctx)
		if err != nil {
			return nil, status.Error(codes.Unauthenticated, "routelock: the caller of this call could not be identified")
		}
		caller = id
	}
	fp, err := m.fingerprint(info.FullMethod, req)
	if err != nil {
		return nil, err
	}
	key, err := idem.LockKey([]string{info.FullMethod}, caller, ik)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, "routelock: this call cannot be scoped by its idempotency key")
	}
	// The lock, or the result: a retry after the first call finished
	// finds it without the lock, and a duplicate in line while the first
	// runs finds it as soon as the first kept it.
	p := m.policy
	p.Route = info.FullMethod
	lease, res, err := lifecycle.AcquireOrResult(ctx, m.l, key, p)
	if res != nil {
		return m.replay(ctx, res, fp)
	}
	if err != nil {
		return nil, m.refuse(ctx, info.FullMethod, err)
	}
	if lease.Reentered() {
		// A call nested in the one that holds the key (by a propagated
		// owner token) is that call's duplicate, in progress.
		_ = lease.Release(ctx)
		return nil, status.Error(codes.Aborted, inProgress)
	}
	return m.run(ctx, req, info, handler, lease, fp)
}

const inProgress = "routelock: a call with this idempotency key is in progress; retry later"

// run runs handler for req under lease, the first holder of its key, and
// stores its result with the lease's release.
func (m *idempotency) run(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler, lease *lifecycle.Lease, fp [sha256.Size]byte) (any, error) {
	hctx := lease.Context()
	finished := false
	defer func() {
		if finished {
			return
		}
		// The handler panicked: its retries get Internal, not a second run.
		st := status.New(codes.Internal, "routelock: the call with this idempotency key failed while it ran")
		m.keep(ctx, info.FullMethod, lease, m.record(fp, st.Code(), st.Proto(), ""))
	}()
	reply, err := handler(hctx, req)
	finished = true
	if err != nil {
		st := status.Convert(err)
		if hctx.Err() != nil || st.Code() == codes.Unavailable {
			// Interrupted, or not done: no answer to keep; a retry runs.
			_ = lease.Release(context.WithoutCancel(ctx))
			return nil, err
		}
		m.keep(ctx, info.FullMethod, lease, m.record(fp, st.Code(), st.Proto(), ""))
		return nil, err
	}
	msg, ok := reply.(proto.Message)
	reason := ""
	if !ok || msg == nil {
		reason = "not a protobuf message"
	}
	m.keep(ctx, info.FullMethod, lease, m.record(fp, codes.OK, msg, reason))
	return reply, nil
}

// record returns the Record of a call with fingerprint fp answered code
// and msg (the reply, or the error's status), or, for a reason, not
// stored.
func (m *idempotency) record(fp [sha256.Size]byte, code codes.Code, msg proto.Message, reason string) *idem.Record {
	rec := &idem.Record{Fingerprint: fp, Status: int(code), Reason: reason}
	if reason != "" {
		return rec
	}
	n := proto.Size(msg)
	rec.Size = int64(n)
	if n > m.c.MaxStored {
		rec.Reason = "over " + strconv.Itoa(m.c.MaxStored) + " bytes"
		return rec
	}
	b, err := proto.Marshal(msg)
	if err != nil {
		rec.Reason = "not marshalled"
		return rec
	}
	rec.Fields = [][2]string{{"type", string(msg.ProtoReflect().Descriptor().FullName())}}
	rec.Body = b
	return rec
}

// keep stores rec with the release of lease, and logs a failure.
func (m *idempotency) keep(ctx context.Context, fullMethod string, lease *lifecycle.Lease, rec *idem.Record) {
	err := lifecycle.Keep(context.WithoutCancel(ctx), lease, rec.Encode(), m.c.Keep)
	if err != nil && m.c.Logger != nil {
		m.c.Logger.Warn("routelock: the result of an idempotent call was not stored: a retry of its key runs it again",
			"method", fullMethod, "err", err)
	}
}

// refuse returns the error of a call with context ctx whose lookup or
// lock failed.
func (m *idempotency) refuse(ctx context.Context, fullMethod string, err error) error {
	if ctx.Err() == nil && errors.Is(err, lockcore.ErrUnavailable) &&
		(errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
		// A context error under ErrUnavailable is then the engine's own
		// timeout (a lookup not answered in time), not the call's end:
		// the store did not answer.
		err = lockcore.ErrUnavailable
	}
	serr := Status(err)
	st := status.Convert(serr)
	switch st.Code() {
	case codes.Aborted:
		p := st.Proto()
		p.Message = inProgress
		return status.ErrorProto(p)
	case codes.Internal:
		if m.c.Logger != nil {
			m.c.Logger.Error("routelock: an idempotent call was refused", "method", fullMethod, "err", err)
		}
	}
	return serr
}

// replay answers with res, a stored result, for a call with fingerprint fp.
func (m *idempotency) replay(ctx context.Context, res []byte, fp [sha256.Size]byte) (any, error) {
	rec, err := idem.Decode(res)
	if err != nil {
		return nil, status.Error(codes.Internal, "routelock: the stored reply of this idempotency key is unreadable")
	}
	if rec.Fingerprint != fp {
		return nil, refusal(reasonKeyReused, "routelock: this idempotency key was used with another request payload")
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs(replayedKey, "true"))
	code := codes.Code(rec.Status)
	if rec.Reason != "" {
		return nil, refusal(reasonNotStored, "routelock: the call with this idempotency key ran, and answered "+code.String()+
			"; its reply was not stored ("+rec.Reason+")")
	}
	if code != codes.OK {
		var sp spb.Status
		if err := proto.Unmarshal(rec.Body, &sp); err != nil {
			return nil, status.Error(codes.Internal, "routelock: the stored reply of this idempotency key is unreadable")
		}
		return nil, status.ErrorProto(&sp)
	}
	var name string
	for _, f := range rec.Fields {
		if f[0] == "type" {
			name = f[1]
		}
	}
	mt, err := messageType(protoreflect.FullName(name))
	if err != nil {
		return nil, status.Error(codes.Internal, "routelock: the stored reply of this idempotency key is of a type this server does not know")
	}
	reply := mt.New().Interface()
	if err := proto.Unmarshal(rec.Body, reply); err != nil {
		return nil, status.Error(codes.Internal, "routelock: the stored reply of this idempotency key is unreadable")
	}
	return reply, nil
}

// refusal returns a FailedPrecondition status with a google.rpc.ErrorInfo
// of reason, in domain routelock.
func refusal(reason, msg string) error {
	st := status.New(codes.FailedPrecondition, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: "routelock"}); err == nil {
		st = d
	}
	return st.Err()
}

// messageType returns the type of the messages of full name name: the
// generated one (protoregistry.GlobalTypes), or else a dynamicpb type of
// its descriptor (protoregistry.GlobalFiles).
func messageType(name protoreflect.FullName) (protoreflect.MessageType, error) {
	if !name.IsValid() {
		return nil, protoregistry.NotFound
	}
	if mt, err := protoregistry.GlobalTypes.FindMessageByName(name); err == nil {
		return mt, nil
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
	if err != nil {
		return nil, err
	}
	md, ok := d.(protoreflect.MessageDescriptor)
	if !ok {
		return nil, errors.New("not a message")
	}
	return dynamicpb.NewMessageType(md), nil
}

// fingerprint returns the digest of a call's payload.
func (m *idempotency) fingerprint(fullMethod string, req any) ([sha256.Size]byte, error) {
	var fp [sha256.Size]byte
	d := sha256.New()
	if m.c.Fingerprint != nil {
		d.Write(m.c.Fingerprint(fullMethod, req))
	} else {
		msg, ok := req.(proto.Message)
		if !ok {
			return fp, status.Error(codes.Internal, "routelock: the request is not a protobuf message: an idempotent method needs IdempotencyConfig.Fingerprint")
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
		if err != nil {
			return fp, status.Error(codes.Internal, "routelock: the request could not be fingerprinted")
		}
		d.Write(strconv.AppendInt(nil, int64(len(fullMethod)), 10))
		d.Write([]byte{':'})
		d.Write([]byte(fullMethod))
		d.Write(b)
	}
	d.Sum(fp[:0])
	return fp, nil
}
