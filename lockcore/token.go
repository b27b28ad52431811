package lockcore

import (
	"context"
	"crypto/rand"
	"fmt"
	"unsafe"
)

// Owner tokens are at most this long; longer inbound values are rejected.
const maxTokenLen = 64

// NewToken returns a fresh owner token: a random (version 4) UUID, in the
// canonical form 8-4-4-4-12 hex digits.
func NewToken() string {
	// One allocation: the 16 random bytes are read into the tail of the
	// 36-byte result and encoded forwards, each output pair written behind
	// the input byte it comes from.
	b := make([]byte, 36)
	r := b[20:]
	_, _ = rand.Read(r)     // never fails (crypto/rand)
	r[6] = r[6]&0x0f | 0x40 // version 4
	r[8] = r[8]&0x3f | 0x80 // RFC 9562 variant
	const hexd = "0123456789abcdef"
	j := 0
	for i := range 16 {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b[j] = '-'
			j++
		}
		c := r[i]
		b[j], b[j+1] = hexd[c>>4], hexd[c&0x0f]
		j += 2
	}
	return unsafe.String(&b[0], len(b))
}

// ParseToken checks that s is an acceptable owner token: 16 to 64 bytes of
// ASCII letters, digits, '-' and '_' (a UUID is). It is meant for tokens that
// arrive from outside the process, such as a propagated header. The error
// never repeats the value.
func ParseToken(s string) (string, error) {
	if len(s) < 16 || len(s) > maxTokenLen {
		return "", fmt.Errorf("%w: length %d, want 16 to %d", ErrInvalidToken, len(s), maxTokenLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '_') {
			return "", fmt.Errorf("%w: byte %d is not a letter, digit, '-' or '_'", ErrInvalidToken, i)
		}
	}
	return s, nil
}

// ctxKey is the context key for the lock state of a request.
type ctxKey struct{}

// ctxState is what a context carries: the owner token and the locks held
// under it, innermost first. One value holds both so that a lookup is one
// walk up the context chain.
type ctxState struct {
	token  string
	held   *hold // nil for a bare token
	parent *ctxState
}

func stateFrom(ctx context.Context) *ctxState {
	s, _ := ctx.Value(ctxKey{}).(*ctxState)
	return s
}

// WithToken returns a context that carries tok as the owner token. Locks
// acquired with it are owned by tok, and an acquisition under the same token
// of a key tok already holds (in this or another process) re-enters the lock.
// Use it for a token propagated from an upstream caller, after validating it
// with ParseToken; Acquire mints a fresh token when the context has none.
func WithToken(ctx context.Context, tok string) context.Context {
	return context.WithValue(ctx, ctxKey{}, &ctxState{token: tok, parent: stateFrom(ctx)})
}

// TokenFrom returns the owner token ctx carries, if any.
func TokenFrom(ctx context.Context) (string, bool) {
	if s := stateFrom(ctx); s != nil {
		return s.token, true
	}
	return "", false
}

// Held describes a lock held by a context, as returned by HeldFrom.
type Held struct {
	Key   Key   // the resource
	Fence int64 // the fencing token of the hold
}

// HeldFrom returns the locks ctx holds (those of leases whose context ctx
// descends from and that are not released or lost), innermost first.
func HeldFrom(ctx context.Context) []Held {
	var out []Held
	for s := stateFrom(ctx); s != nil; s = s.parent {
		if h := s.held; h != nil && h.live() {
			out = append(out, Held{Key: h.key, Fence: h.fence})
		}
	}
	return out
}

// FencingToken returns the fencing token of the innermost lock ctx holds.
func FencingToken(ctx context.Context) (int64, bool) {
	for s := stateFrom(ctx); s != nil; s = s.parent {
		if h := s.held; h != nil && h.live() {
			return h.fence, true
		}
	}
	return 0, false
}
