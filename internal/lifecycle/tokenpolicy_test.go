package lifecycle

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/routelock/lock/lockcore"
)

// TestNewToken: tokens are 32 lower-case hex digits, distinct, and every
// one of their 128 bits varies (a UUID's version and variant bits do not).
func TestNewToken(t *testing.T) {
	seen := make(map[string]bool)
	var ones, zeros [16]byte
	for range 10000 {
		tok := NewToken()
		b, err := hex.DecodeString(tok)
		if err != nil || len(b) != 16 || strings.ToLower(tok) != tok {
			t.Fatalf("token %q: want 32 lower-case hex digits (%v)", tok, err)
		}
		for i, c := range b {
			ones[i] |= c
			zeros[i] |= ^c
		}
		if _, err := parseToken(tok); err != nil {
			t.Fatalf("parseToken(%q): %v", tok, err)
		}
		if seen[tok] {
			t.Fatalf("token %q minted twice", tok)
		}
		seen[tok] = true
	}
	for i := range 16 {
		if ones[i] != 0xff || zeros[i] != 0xff {
			t.Errorf("byte %d: bits never 1 %08b, never 0 %08b", i, ^ones[i], ^zeros[i])
		}
	}
}

// TestPolicySegments: Validate bounds Segments and refuses it with Share;
// an engine's Begin refuses a segmented Policy (it is AcquireSegment's).
func TestPolicySegments(t *testing.T) {
	for _, p := range []Policy{{Segments: -1}, {Segments: MaxSegments + 1}, {Segments: 2, Share: 2}, {Segments: 2, Share: ShareAll}} {
		if err := p.Validate(); !errors.Is(err, lockcore.ErrMisconfigured) {
			t.Errorf("Validate(%+v) = %v", p, err)
		}
	}
	if err := (Policy{Segments: MaxSegments}).Validate(); err != nil {
		t.Fatal(err)
	}
	k, _ := lockcore.NewKey("a")
	// Every segment a valid Policy names has a key, and lockcore names
	// no more.
	if _, i, ok := Segmented(SegmentKey(k, MaxSegments-1)); !ok || i != MaxSegments-1 {
		t.Fatalf("the key of segment %d: %d %v", MaxSegments-1, i, ok)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Errorf("SegmentKey(%d) did not panic: more segments than a Policy may have", MaxSegments)
			}
		}()
		SegmentKey(k, MaxSegments)
	}()
	if _, _, err := begin(t.Context(), &testEngine{}, k, Policy{Segments: 2}); !errors.Is(err, lockcore.ErrMisconfigured) {
		t.Fatalf("Begin with Segments: %v", err)
	}
	if (Policy{}).Or(Policy{Segments: 3}).Segments != 3 {
		t.Fatal("Or does not take Segments")
	}
}

// TestSegmentKey: a segment's key reads back (Segmented, ParseKey) and
// names its resource; a resource's key is no segment's; SegmentKey panics
// on a number out of range, a zero key or a segment's key.
func TestSegmentKey(t *testing.T) {
	k, _ := lockcore.NewKey("productID", "42")
	s := SegmentKey(k, 3)
	if s.String() != "productID:42 #3" || s.Name() != "productID" {
		t.Fatalf("SegmentKey(k, 3) = %q named %q", s, s.Name())
	}
	if base, i, ok := Segmented(s); !ok || base != k || i != 3 {
		t.Fatalf("Segmented = %v %d %v", base, i, ok)
	}
	if p, err := lockcore.ParseKey(s.String()); err != nil || p != s {
		t.Fatalf("ParseKey(%q) = %q, %v", s, p, err)
	}
	if _, _, ok := Segmented(k); ok {
		t.Fatal("a resource's key reads as a segment's")
	}
	one, _ := lockcore.NewKey("global")
	if SegmentKey(one, 0).Name() != "global" {
		t.Fatalf("Name of %q = %q", SegmentKey(one, 0), SegmentKey(one, 0).Name())
	}
	for _, f := range []func(){
		func() { SegmentKey(k, -1) },
		func() { SegmentKey(k, MaxSegments) },
		func() { SegmentKey(s, 0) },
		func() { SegmentKey(lockcore.Key{}, 0) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("SegmentKey did not panic")
				}
			}()
			f()
		}()
	}
}
