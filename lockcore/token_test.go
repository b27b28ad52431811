package lockcore

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParseToken: any input is either refused with ErrInvalidToken or
// returned as is, and an accepted token has only the bytes that the scripts'
// space-separated waiter entries and the HTTP header can carry.
func FuzzParseToken(f *testing.F) {
	for _, s := range []string{NewToken(), "", "short", strings.Repeat("a", 16), strings.Repeat("a", maxTokenLen+1),
		"0123456789abcdef 0123", "0123456789abcdef\n", "0123456789abcdef\x00", "ünïcødé-ünïcødé-ü", "{tag}0123456789abcdef"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParseToken(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidToken) {
				t.Fatalf("ParseToken(%q): %v, want ErrInvalidToken", s, err)
			}
			if len(s) >= 16 && strings.Contains(err.Error(), s) {
				t.Fatalf("the error repeats the token: %v", err)
			}
			return
		}
		if tok != s || len(s) < 16 || len(s) > maxTokenLen {
			t.Fatalf("ParseToken(%q) = %q", s, tok)
		}
		if strings.ContainsAny(s, " \t\r\n\x00{}:%") {
			t.Fatalf("accepted %q", s)
		}
	})
}
