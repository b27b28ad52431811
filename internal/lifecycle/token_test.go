package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/routelock/lock/lockcore"
)

// FuzzParseToken: any input to parseToken is either refused with
// lockcore.ErrInvalidToken or returned as is, and an accepted token has only the
// bytes that the scripts' space-separated waiter entries and the HTTP
// header can carry.
func FuzzParseToken(f *testing.F) {
	for _, s := range []string{NewToken(), "", "short", strings.Repeat("a", 16), strings.Repeat("a", maxTokenLen+1),
		"0123456789abcdef 0123", "0123456789abcdef\n", "0123456789abcdef\x00", "ünïcødé-ünïcødé-ü", "{tag}0123456789abcdef"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := parseToken(s)
		if err != nil {
			if !errors.Is(err, lockcore.ErrInvalidToken) {
				t.Fatalf("parseToken(%q): %v, want lockcore.ErrInvalidToken", s, err)
			}
			if len(s) >= 16 && strings.Contains(err.Error(), s) {
				t.Fatalf("the error repeats the token: %v", err)
			}
			return
		}
		if tok != s || len(s) < 16 || len(s) > maxTokenLen {
			t.Fatalf("parseToken(%q) = %q", s, tok)
		}
		if strings.ContainsAny(s, " \t\r\n\x00{}:%") {
			t.Fatalf("accepted %q", s)
		}
	})
}

// TestIntake pins what Intake does with the values of a token header or
// metadata entry: which it takes, which it ignores and which it refuses,
// with what error, and when it asks trust. Both transports take inbound
// tokens only through it, so this is what an HTTP or gRPC caller gets.
func TestIntake(t *testing.T) {
	const name = "Routelock-Token"
	var (
		tok   = NewToken()
		tok2  = NewToken()
		min   = "abcdefghijklmnop"                     // 16 bytes
		max   = strings.Repeat("Z", maxTokenLen)       // 64 bytes
		uuid  = "123e4567-e89b-12d3-a456-426614174000" // an earlier version's token
		big   = strings.Repeat("Q", maxTokenLen+1)
		huge  = strings.Repeat("W", 4000)
		short = "abcdefghijklmno" // 15 bytes
		own   = "propagated-before-0123"
	)
	list := func(n int) ([]string, string) {
		toks := make([]string, n)
		for i := range toks {
			toks[i] = NewToken()
		}
		return toks, strings.Join(toks, ",")
	}
	toks16, list16 := list(16)
	_, list17 := list(17)
	const (
		trustNil = iota // trust is nil: every caller may bring tokens
		trustYes
		trustNo
	)
	invalid := "routelock: invalid owner token: "
	for _, c := range []struct {
		name  string
		own   bool // ctx already carries a token
		trust int
		vals  []string
		want  []string // the tokens the result carries; nil: ctx itself
		err   string   // the whole error text; "": none
		calls int      // how often trust is asked
	}{
		{name: "no value", vals: nil},
		{name: "no value, untrusted", trust: trustNo, vals: []string{}},
		{name: "one token", vals: []string{tok}, want: []string{tok}},
		{name: "one token, trusted", trust: trustYes, vals: []string{tok}, want: []string{tok}, calls: 1},
		{name: "shortest and longest", vals: []string{min + "," + max}, want: []string{min, max}},
		{name: "uuid", vals: []string{uuid}, want: []string{uuid}},
		{name: "blanks around commas", vals: []string{" " + tok + " ,\t" + tok2 + "\t"}, want: []string{tok, tok2}},
		{name: "same token twice in a list", vals: []string{tok + "," + tok}, want: []string{tok}},
		{name: "16 tokens", vals: []string{list16}, want: toks16},
		{name: "17 tokens", vals: []string{list17}, err: invalid + "17 tokens, want at most 16"},
		{name: "empty value", vals: []string{""}, err: invalid + "length 0, want 16 to 64 (token 1)"},
		{name: "blank value", vals: []string{" \t "}, err: invalid + "length 0, want 16 to 64 (token 1)"},
		{name: "empty element", vals: []string{tok + ",," + tok2}, err: invalid + "length 0, want 16 to 64 (token 2)"},
		{name: "trailing comma", vals: []string{tok + ","}, err: invalid + "length 0, want 16 to 64 (token 2)"},
		{name: "given twice", vals: []string{tok, tok2}, err: invalid + name + " given 2 times"},
		{name: "given twice, same", vals: []string{tok, tok}, err: invalid + name + " given 2 times"},
		{name: "given three times, trusted", trust: trustYes, vals: []string{tok, "", "third"}, err: invalid + name + " given 3 times", calls: 1},
		{name: "undersized", vals: []string{short}, err: invalid + "length 15, want 16 to 64 (token 1)"},
		{name: "oversized", vals: []string{big}, err: invalid + "length 65, want 16 to 64 (token 1)"},
		{name: "huge", vals: []string{huge}, err: invalid + "length 4000, want 16 to 64 (token 1)"},
		{name: "inner space", vals: []string{"abcdefgh ijklmnop"}, err: invalid + "byte 8 is not a letter, digit, '-' or '_' (token 1)"},
		{name: "NUL", vals: []string{"abcdefghijklmnop\x00"}, err: invalid + "byte 16 is not a letter, digit, '-' or '_' (token 1)"},
		{name: "CRLF", vals: []string{"abcdefghijklmnop\r\nX-Evil: 1"}, err: invalid + "byte 16 is not a letter, digit, '-' or '_' (token 1)"},
		{name: "DEL", vals: []string{"abcdefgh\x7fijklmnop"}, err: invalid + "byte 8 is not a letter, digit, '-' or '_' (token 1)"},
		{name: "invalid UTF-8", vals: []string{"\xff\xfe-bad-utf8-bad-utf8"}, err: invalid + "byte 0 is not a letter, digit, '-' or '_' (token 1)"},
		{name: "non-ASCII", vals: []string{"ünïcødé-ünïcødé-ü"}, err: invalid + "byte 0 is not a letter, digit, '-' or '_' (token 1)"},
		{name: "semicolon", vals: []string{tok + ";" + tok2}, err: invalid + "length 65, want 16 to 64 (token 1)"},
		{name: "bad second token", vals: []string{tok + "," + tok2[:20] + "{x}"}, err: invalid + "byte 20 is not a letter, digit, '-' or '_' (token 2)"},
		{name: "untrusted, valid", trust: trustNo, vals: []string{tok}, calls: 1},
		{name: "untrusted, malformed", trust: trustNo, vals: []string{"\x00bad"}, calls: 1},
		{name: "untrusted, given twice", trust: trustNo, vals: []string{tok, tok2}, calls: 1},
		{name: "untrusted, 17 tokens", trust: trustNo, vals: []string{list17}, calls: 1},
		{name: "own token, valid", own: true, trust: trustYes, vals: []string{tok}},
		{name: "own token, malformed", own: true, vals: []string{"\x00bad"}},
		{name: "own token, given twice", own: true, trust: trustNo, vals: []string{tok, tok2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.WithValue(context.Background(), parentKey{}, c.name) // a context of its own
			if c.own {
				ctx = withToken(ctx, own)
			}
			calls := 0
			var trust func() bool
			if c.trust != trustNil {
				trust = func() bool { calls++; return c.trust == trustYes }
			}
			got, err := Intake(ctx, name, c.vals, trust)
			if calls != c.calls {
				t.Errorf("trust asked %d times, want %d", calls, c.calls)
			}
			if c.err != "" {
				if !errors.Is(err, lockcore.ErrInvalidToken) || err.Error() != c.err {
					t.Fatalf("error %v, want %q (lockcore.ErrInvalidToken)", err, c.err)
				}
				for _, v := range c.vals {
					for _, f := range append(strings.Split(v, ","), v) {
						if f = strings.Trim(f, " \t"); f != "" && strings.Contains(err.Error(), f) {
							t.Fatalf("the error repeats %q: %v", f, err)
						}
					}
				}
			} else if err != nil {
				t.Fatalf("error %v, want none", err)
			}
			if got != ctx && (c.want == nil || c.err != "") {
				t.Fatal("got another context, want ctx itself")
			}
			if c.want == nil {
				return
			}
			if got.Value(parentKey{}) != c.name {
				t.Fatal("the result does not derive from ctx")
			}
			if toks := TokensFrom(got); !slices.Equal(toks, c.want) {
				t.Fatalf("carries %q, want %q", toks, c.want)
			}
			if first, ok := tokenFrom(got); !ok || first != c.want[0] {
				t.Fatalf("tokenFrom = %q, %v; want %q", first, ok, c.want[0])
			}
			if back := Outbound(got); back != strings.Join(c.want, ",") {
				t.Fatalf("Outbound = %q", back)
			}
		})
	}
}

type parentKey struct{}

// TestOutbound: Outbound writes what a context carries as one value that
// Intake reads back to the same tokens, and nothing for a context that
// carries none.
func TestOutbound(t *testing.T) {
	ctx := context.Background()
	if v := Outbound(ctx); v != "" {
		t.Fatalf("Outbound of a context without tokens = %q, want \"\"", v)
	}
	a, b := NewToken(), NewToken()
	ctx = withToken(withToken(ctx, a), b)
	v := Outbound(ctx)
	if v != b+","+a {
		t.Fatalf("Outbound = %q, want the innermost first", v)
	}
	got, err := Intake(context.Background(), "routelock-token", []string{v}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if back := Outbound(got); back != v {
		t.Fatalf("after Intake: %q, want %q", back, v)
	}
	for i := range 20 { // more than a list may hold: the innermost 16 go
		ctx = withToken(ctx, fmt.Sprintf("token-%011d", i))
	}
	v = Outbound(ctx)
	if n := strings.Count(v, ",") + 1; n != maxTokens || !strings.HasPrefix(v, "token-00000000019,") {
		t.Fatalf("Outbound of 22 tokens: %d of them, %q", n, v)
	}
	if _, err := Intake(context.Background(), "routelock-token", []string{v}, nil); err != nil {
		t.Fatalf("Intake refuses what Outbound wrote: %v", err)
	}
}

// withToken returns ctx carrying tok as its innermost owner token, whatever
// ctx carries already, unchecked: a context Intake could not make.
func withToken(ctx context.Context, tok string) context.Context {
	return withTokens(ctx, []string{tok})
}
