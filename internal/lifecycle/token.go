package lifecycle

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/routelock/lock/lockcore"
)

// Owner tokens are at most this long; longer inbound values are rejected.
const maxTokenLen = 64

// maxTokens is how many owner tokens a context passes on (Outbound) and an
// inbound list may hold (Intake).
const maxTokens = 16

// NewToken returns a fresh owner token: 128 random bits as 32 lower-case
// hex digits.
func NewToken() string {
	// One allocation: the 16 random bytes are read into the tail of the
	// 32-byte result and encoded forwards, each output pair written over or
	// behind the input byte it comes from.
	b := make([]byte, 32)
	r := b[16:]
	_, _ = rand.Read(r) // never fails (crypto/rand)
	const hexd = "0123456789abcdef"
	for i := range 16 {
		c := r[i]
		b[2*i], b[2*i+1] = hexd[c>>4], hexd[c&0x0f]
	}
	return unsafe.String(&b[0], len(b))
}

// Intake returns ctx with the owner tokens that an upstream caller sent:
// vals are the values of the header or metadata entry called name, which
// the transport removes from what the handler sees, whatever this returns.
// It returns ctx as it is, and no error, when vals is empty; when ctx
// already carries a token, which an inbound one never replaces (a nested
// call keeps its own); and when trust is not nil and reports false, for a
// caller that may not bring tokens: they are ignored, and its locks get
// fresh tokens like anyone's. trust is called at most once, and only when
// vals is not empty and ctx carries no token.
//
// Otherwise vals must be one value: 1 to 16 tokens separated by commas
// (spaces and tabs around a comma are allowed), each 16 to 64 bytes of
// ASCII letters, digits, '-' and '_', as Outbound writes them. The returned
// context carries them, innermost first. Any other vals fail with an error
// that wraps ErrInvalidToken, names name and never repeats a value; ctx is
// returned with it.
//
// An acquisition under the returned context re-enters a lock that one of
// its tokens holds, in this or another process, instead of waiting for it.
// A token never takes a free lock: every fresh hold gets a token of its own
// (NewToken), which the lease's context then carries too. So a token grants
// nothing but re-entry into the holds it names, and only while they are
// live.
func Intake(ctx context.Context, name string, vals []string, trust func() bool) (context.Context, error) {
	if len(vals) == 0 {
		return ctx, nil
	}
	if _, ok := tokenFrom(ctx); ok || (trust != nil && !trust()) {
		return ctx, nil
	}
	if len(vals) > 1 {
		return ctx, fmt.Errorf("%w: %s given %d times", lockcore.ErrInvalidToken, name, len(vals))
	}
	toks, err := parseTokens(vals[0])
	if err != nil {
		return ctx, err
	}
	return withTokens(ctx, toks), nil
}

// Outbound returns the owner tokens ctx carries (TokensFrom: those of the
// live locks it holds and those it was given, innermost first, at most 16)
// as the one header or metadata value that a call to another service
// carries, so that the callee re-enters any lock of the chain (Intake reads
// it there). It returns "" when ctx carries no token: send nothing then.
func Outbound(ctx context.Context) string { return joinTokens(TokensFrom(ctx)) }

// parseToken checks that s is an acceptable owner token: 16 to 64 bytes of
// ASCII letters, digits, '-' and '_' (the tokens of NewToken are, and so
// are the UUIDs of earlier versions). It is meant for tokens that arrive
// from outside the process, such as a propagated header. The error never
// repeats the value.
func parseToken(s string) (string, error) {
	if len(s) < 16 || len(s) > maxTokenLen {
		return "", fmt.Errorf("%w: length %d, want 16 to %d", lockcore.ErrInvalidToken, len(s), maxTokenLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '_') {
			return "", fmt.Errorf("%w: byte %d is not a letter, digit, '-' or '_'", lockcore.ErrInvalidToken, i)
		}
	}
	return s, nil
}

// parseTokens parses a propagated list of owner tokens: 1 to maxTokens
// tokens (see parseToken) separated by commas, as Outbound writes them
// (spaces around a comma are allowed). The error never repeats the value.
func parseTokens(s string) ([]string, error) {
	n := strings.Count(s, ",") + 1
	if n > maxTokens {
		return nil, fmt.Errorf("%w: %d tokens, want at most %d", lockcore.ErrInvalidToken, n, maxTokens)
	}
	out := make([]string, 0, n)
	for i, f := range strings.Split(s, ",") {
		tok, err := parseToken(strings.Trim(f, " \t"))
		if err != nil {
			return nil, fmt.Errorf("%w (token %d)", err, i+1)
		}
		out = append(out, tok)
	}
	return out, nil
}

// joinTokens returns toks as one header or metadata value, which Intake
// reads: Outbound(ctx) is joinTokens(TokensFrom(ctx)).
func joinTokens(toks []string) string { return strings.Join(toks, ",") }

// ctxKey is the context key for the lock state of a request.
type ctxKey struct{}

// ctxState is what a context carries: the owner tokens and locks of a
// request, innermost first, each node one token, and the hold when the
// token is that of a lock the request holds. One value holds both so that
// a lookup is one walk up the context chain. A node may instead be a slot
// (WithHoldSlot), which walks skip until it is filled and then go through
// the lease's state. Walk with s.first() and s.next().
type ctxState struct {
	token  string
	held   *held // nil for a propagated token
	parent *ctxState
	slot   *atomic.Pointer[ctxState] // non-nil for a slot
}

func stateFrom(ctx context.Context) *ctxState {
	s, _ := ctx.Value(ctxKey{}).(*ctxState)
	return s
}

// first returns s, or, when s is a slot, the state it stands for: the
// lease's once filled, else what is above it.
func (s *ctxState) first() *ctxState {
	for s != nil && s.slot != nil {
		if f := s.slot.Load(); f != nil {
			s = f
		} else {
			s = s.parent
		}
	}
	return s
}

// next returns the node after s in a walk.
func (s *ctxState) next() *ctxState { return s.parent.first() }

// WithHoldSlot returns a context that carries ctx's lock state, and a
// function that fills it in with a lease: from then on the context and
// every context derived from it carry the lease's hold too (HeldFrom,
// TokensFrom and re-entry see it), as the lease's own context
// does. It is for a handler that gets its context before its lock is
// taken, such as a gRPC stream whose key is in its first message. The
// lease must have been acquired with ctx or a context above it, not with
// the returned one; cancellation stays ctx's (derive the lease's loss into
// it with context.AfterFunc). Fill it once.
func WithHoldSlot(ctx context.Context) (context.Context, func(*Lease)) {
	st := &ctxState{parent: stateFrom(ctx), slot: new(atomic.Pointer[ctxState])}
	return context.WithValue(ctx, ctxKey{}, st), func(ls *Lease) {
		for p := &ls.h.st; p != nil; p = p.parent {
			if p == st {
				panic("routelock: lifecycle.WithHoldSlot: the lease was acquired with the slot's own context")
			}
		}
		st.slot.Store(&ls.h.st)
	}
}

// withTokens returns a context that carries toks, a propagated list as
// parseTokens returns it (innermost first).
func withTokens(ctx context.Context, toks []string) context.Context {
	st := stateFrom(ctx)
	for i := len(toks) - 1; i >= 0; i-- {
		st = &ctxState{token: toks[i], parent: st}
	}
	if st == stateFrom(ctx) {
		return ctx
	}
	return context.WithValue(ctx, ctxKey{}, st)
}

// tokenFrom returns the innermost owner token ctx carries, if any: that of
// the innermost lock it holds, or the innermost one given to Intake; it is
// the first of TokensFrom.
func tokenFrom(ctx context.Context) (string, bool) {
	for s := stateFrom(ctx).first(); s != nil; s = s.next() {
		if s.held == nil || s.held.live() {
			return s.token, true
		}
	}
	return "", false
}

// TokensFrom returns the owner tokens ctx carries, innermost first and at
// most 16 of them: those of the live locks it holds and those given to
// Intake. They are what a call to another service carries
// (see Outbound), so that the callee re-enters any lock of the chain.
func TokensFrom(ctx context.Context) []string { return stateFrom(ctx).tokens() }

// tokens returns the distinct tokens of st and its parents, skipping locks
// no longer held, innermost first and at most maxTokens.
func (st *ctxState) tokens() []string {
	var out []string
	for s := st.first(); s != nil && len(out) < maxTokens; s = s.next() {
		if (s.held == nil || s.held.expose()) && !slices.Contains(out, s.token) {
			out = append(out, s.token)
		}
	}
	return out
}

// Held describes a lock held by a context, as returned by HeldFrom.
type Held struct {
	Key   lockcore.Key // the resource
	Fence int64        // the fencing token of the hold
	// Slot is the hold's slot among the key's permits (Lease.Slot); -1
	// when it has none: an exclusive hold, or a ShareAll one.
	Slot int
	// Shared reports a hold shared with other owners (Policy.Share).
	Shared bool
}

// HeldFrom returns the locks ctx holds (those of leases whose context ctx
// descends from and that are not released or lost), innermost first: the
// first one's Fence is the fencing token to pass to a store (what
// lock.FencingToken returns).
func HeldFrom(ctx context.Context) []Held {
	var out []Held
	for s := stateFrom(ctx).first(); s != nil; s = s.next() {
		if h := s.held; h != nil && h.live() {
			at := h.at()
			out = append(out, Held{Key: at.key, Fence: at.fence, Slot: int(h.slot), Shared: h.shared})
		}
	}
	return out
}
