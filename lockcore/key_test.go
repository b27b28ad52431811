package lockcore

import (
	"errors"
	"strings"
	"testing"

	"github.com/routelock/lock/internal/keylimit"
)

func TestNewKey(t *testing.T) {
	long := strings.Repeat("x", keylimit.PartLen)
	tests := []struct {
		parts []string
		want  string
		err   bool
	}{
		{[]string{"productID", "42"}, "productID:42", false},
		{[]string{"a:b", "c"}, "a%3Ab:c", false},
		{[]string{"a", "b:c"}, "a:b%3Ac", false},
		{[]string{"{slot}"}, "%7Bslot%7D", false},
		{[]string{"50%"}, "50%25", false},
		{[]string{"a b\n"}, "a%20b%0A", false},
		{[]string{"é"}, "%C3%A9", false},
		{[]string{long}, long, false},
		{[]string{long + "x"}, "", true},
		{[]string{""}, "", true},
		{[]string{"a", ""}, "", true},
		{nil, "", true},
		{make([]string, keylimit.Parts+1), "", true},
	}
	for _, tt := range tests {
		k, err := NewKey(tt.parts...)
		if tt.err {
			if !errors.Is(err, ErrInvalidKey) {
				t.Errorf("NewKey(%q): err = %v, want ErrInvalidKey", tt.parts, err)
			}
			continue
		}
		if err != nil || k.String() != tt.want {
			t.Errorf("NewKey(%q) = %q, %v; want %q", tt.parts, k, err, tt.want)
		}
	}
}

// FuzzNewKey checks that escaping is injective and never emits the
// characters that would break out of the hash tag.
func FuzzNewKey(f *testing.F) {
	f.Add("a:b", "c", "a", "b:c")
	f.Add("%3A", "x", ":", "x")
	f.Add("{", "}", "%7B", "%7D")
	f.Fuzz(func(t *testing.T, a, b, c, d string) {
		k1, err1 := NewKey(a, b)
		k2, err2 := NewKey(c, d)
		if err1 != nil || err2 != nil {
			return
		}
		if strings.ContainsAny(k1.String(), "{} \x00") {
			t.Fatalf("key %q contains a forbidden byte", k1)
		}
		if (a == c && b == d) != (k1 == k2) {
			t.Fatalf("(%q,%q) -> %q and (%q,%q) -> %q", a, b, k1, c, d, k2)
		}
	})
}

// TestParseKeySegment: ParseKey reads a segment's key (a resource's key,
// " #" and a number below 256), which names its resource, and refuses
// every other suffix; no key NewKey makes is a segment's, whatever the
// parts: the mark has a space, which NewKey escapes.
func TestParseKeySegment(t *testing.T) {
	for _, in := range []string{"productID:42 #3", "a #0", "a:b%20c #255"} {
		got, err := ParseKey(in)
		if err != nil || got.String() != in || got.Name() != strings.SplitN(strings.SplitN(in, ":", 2)[0], " ", 2)[0] {
			t.Fatalf("ParseKey(%q) = %q named %q, %v", in, got, got.Name(), err)
		}
	}
	for _, in := range []string{"a #", "a #01", "a #256", "a #-1", "a #+1", "a #1 #2", " #1", "a b #1", "a #1x"} {
		if got, err := ParseKey(in); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ParseKey(%q) = %q, %v; want ErrInvalidKey", in, got, err)
		}
	}
	for _, parts := range [][]string{{"productID", "42 #3"}, {"productID:42 #3"}, {"a", " #0"}} {
		nk, err := NewKey(parts...)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(nk.String(), segmentMark) {
			t.Fatalf("NewKey(%q) = %q reads as a segment's", parts, nk)
		}
	}
}
