package operate_test

import (
	"testing"

	"github.com/routelock/lock/internal/operate"
)

// TestOwnerDigest: the digest is the one the README describes (the first
// 12 hex digits of SHA-1 over "routelock owner digest", a zero byte and
// the token), so a holder can compute it from its token, and it differs
// for tokens that differ in one byte.
func TestOwnerDigest(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	if got, want := operate.OwnerDigest(token), "d09d63f4f0d0"; got != want {
		t.Errorf("OwnerDigest(%q) = %q, want %q", token, got, want)
	}
	if a, b := operate.OwnerDigest(token), operate.OwnerDigest(token[:31]+"e"); a == b {
		t.Errorf("two tokens share the digest %s", a)
	}
}
