package keyfunc_test

import (
	"bytes"
	"net/http/httptest"
	"regexp"
	"testing"

	"github.com/routelock/lock/keyfunc"
)

// headerKey returns the value part of Header(X-K)'s key for value v, and
// whether it yields one.
func headerKey(v string) (string, bool) {
	r := httptest.NewRequest("GET", "/", nil)
	r.Header["X-K"] = []string{v}
	parts, _, err := keyfunc.Header("X-K").HTTP(r)
	if err != nil {
		return "", false
	}
	return parts[1], true
}

// jsonKey returns the value part of JSON(a)'s key for the JSON text num.
func jsonKey(num string) (string, bool) {
	r := httptest.NewRequest("POST", "/", bytes.NewReader([]byte(`{"a":`+num+`}`)))
	parts, _, err := keyfunc.JSON("a").HTTP(r)
	if err != nil {
		return "", false
	}
	return parts[1], true
}

// TestCanonicalKeys: one resource, one key, however it is spelt: decimal
// integers with a sign or leading zeros, UUIDs in either case, JSON numbers
// in any notation; and values that name other resources keep their own.
func TestCanonicalKeys(t *testing.T) {
	for _, same := range [][]string{
		{"42", "042", "+42", "+0042"},
		{"0", "-0", "+0", "000"},
		{"-7", "-007"},
		{"123456789012345678901234567890", "00123456789012345678901234567890"},
		{"3f2504e0-4f89-11d3-9a0c-0305e82c3301", "3F2504E0-4F89-11D3-9A0C-0305E82C3301", "3f2504e0-4F89-11d3-9a0c-0305E82C3301"},
	} {
		want, _ := headerKey(same[0])
		if want != same[0] {
			t.Errorf("the canonical %q became %q", same[0], want)
		}
		for _, v := range same[1:] {
			if got, ok := headerKey(v); !ok || got != want {
				t.Errorf("Header %q → %q, want %q like %q", v, got, want, same[0])
			}
		}
	}
	for _, v := range []string{"42a", "4 2", "0x2a", "4.2", "42.0", "1e3", "u42", "3f2504e0-4f89-11d3-9a0c-0305e82c330g", "ABC", "+", "-", "Ä"} {
		if got, ok := headerKey(v); !ok || got != v {
			t.Errorf("Header %q → %q, want it unchanged", v, got)
		}
	}
	for _, same := range [][]string{
		{"42", "42.0", "4.2e1", "420e-1", "4.20E+1", "0.42e2", "42e0", "42.000e-0"},
		{"0.5", "5e-1", "0.50", "50e-2"},
		{"-1.25", "-125e-2", "-0.0125e2"},
		{"0", "-0", "0.0", "0e10", "-0.0e-5"},
		{"100000000000000000000000000001", "1.00000000000000000000000000001e29"},
	} {
		for _, v := range same {
			if got, ok := jsonKey(v); !ok || got != same[0] {
				t.Errorf("JSON %s → %q %v, want %q", v, got, ok, same[0])
			}
		}
	}
	// 2^53+1 is not 2^53, though float64 makes them one.
	if a, _ := jsonKey("9007199254740993"); a == "9007199254740992" {
		t.Error("JSON 9007199254740993 and 9007199254740992 share a key")
	}
	// Absurd exponents are refused, at once, not computed.
	for _, v := range []string{"1e999999999", "1e-999999999", "1e300", "1e-300", "1e100000"} {
		if got, ok := jsonKey(v); ok {
			t.Errorf("JSON %s → %q, want it refused", v, got)
		}
	}
}

// FuzzCanonicalKeys: canonical forms are idempotent, and two values get
// the same key exactly when an independent reading of them (big.Int,
// big.Rat, lower-case UUIDs) says they name the same value.
func FuzzCanonicalKeys(f *testing.F) {
	for _, s := range [][2]string{{"42", "042"}, {"-0", "0"}, {"+7", "7"}, {"1.50", "15e-1"}, {"42.0", "4.2e1"},
		{"3F2504E0-4F89-11D3-9A0C-0305E82C3301", "3f2504e0-4f89-11d3-9a0c-0305e82c3301"}, {"a", "A"}, {"1e5", "100000"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ka, oka := headerKey(a)
		kb, okb := headerKey(b)
		if oka {
			if again, _ := headerKey(ka); again != ka {
				t.Fatalf("Header: %q → %q → %q", a, ka, again)
			}
		}
		if oka && okb && (ka == kb) != (canonText(a) == canonText(b)) {
			t.Fatalf("Header %q → %q and %q → %q; independently %q and %q", a, ka, b, kb, canonText(a), canonText(b))
		}
		if !numRE.MatchString(a) {
			return
		}
		ja, oka := jsonKey(a)
		if !oka {
			return
		}
		if again, _ := jsonKey(ja); again != ja {
			t.Fatalf("JSON: %s → %q → %q", a, ja, again)
		}
		if want := canon(a); ja != want {
			t.Fatalf("JSON %s → %q, independently %q", a, ja, want)
		}
		if jb, okb := jsonKey(b); okb && numRE.MatchString(b) && (ja == jb) != (canon(a) == canon(b)) {
			t.Fatalf("JSON %s → %q and %s → %q", a, ja, b, jb)
		}
	})
}

// numRE is JSON's number syntax.
var numRE = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)
