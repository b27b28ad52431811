package keyfunc_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/routelock/lock/internal/chiroute"
	"github.com/routelock/lock/internal/keylimit"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
)

// checkResult fails unless parts and err are a well-formed result of f:
// either parts of the right count with every value non-empty and at most
// keylimit.PartLen bytes, or an error with a Public text matching
// ErrSkip or one of lockcore's sentinels for key errors.
func checkResult(t *testing.T, f keyfunc.Func, parts []string, err error) {
	t.Helper()
	if err != nil {
		var p interface{ Public() string }
		if !errors.Is(err, keyfunc.ErrSkip) && !errors.As(err, &p) {
			t.Fatalf("%v: error %#v has no Public text", f, err)
		}
		for _, s := range []error{keyfunc.ErrSkip, lockcore.ErrInvalidKey, lockcore.ErrMisconfigured, chiroute.ErrNoRoute} {
			if errors.Is(err, s) {
				return
			}
		}
		t.Fatalf("%v: error %v matches no sentinel", f, err)
	}
	if len(parts) == 0 {
		t.Fatalf("%v: no parts and no error", f)
	}
	for _, p := range parts {
		if p == "" || len(p) > keylimit.PartLen {
			t.Fatalf("%v: bad part %q in %q", f, p, parts)
		}
	}
}

// FuzzRequest feeds arbitrary HTTP requests through a chi router whose
// top-level middleware evaluates every HTTP key function: none may panic,
// and every result must be well formed.
func FuzzRequest(f *testing.F) {
	for _, seed := range []string{
		"POST /p/42 HTTP/1.1\r\nHost: x\r\nX-K: v\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"a\":{\"b\":1}}",
		"GET /p/4%2F2/x/y?q=1&q=2 HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /m/7/s?f=1 HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 5\r\n\r\nf=abc",
		"POST /m/7/s HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: 9\r\n\r\n--b--\r\n\r\n",
		"GET /health HTTP/1.1\r\nHost: x\r\nX-K: a\r\nX-K: b\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	funcs := []keyfunc.Func{
		keyfunc.Param("id"),
		keyfunc.Param("rest"),
		keyfunc.Header("X-K"),
		keyfunc.Query("q"),
		keyfunc.Form("f"),
		keyfunc.JSONLimit("a.b", 4096),
		keyfunc.Join(keyfunc.Param("id"), keyfunc.Header("X-K")).As("j"),
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return
		}
		r := chi.NewRouter()
		r.Use(func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for _, fn := range funcs {
					parts, _, err := fn.HTTP(r)
					checkResult(t, fn, parts, err)
				}
				next.ServeHTTP(w, r)
			})
		})
		h := func(http.ResponseWriter, *http.Request) {}
		r.HandleFunc("/p/{id}", h)
		r.HandleFunc("/p/{id}/x/{rest}", h)
		r.Route("/m/{id}", func(r chi.Router) { r.HandleFunc("/s", h) })
		r.ServeHTTP(httptest.NewRecorder(), req)
	})
}

// FuzzJSON checks JSON against encoding/json: whenever JSON finds a value
// and encoding/json, decoding the body into generic maps, finds a scalar at
// the same path, the two agree (after canonical numbers).
func FuzzJSON(f *testing.F) {
	for _, seed := range [][2]string{
		{`{"a":{"b":"x"}}`, "a.b"},
		{`{"a":[{"b":1.50}]}`, "a.0.b"},
		{`{"A":1,"a":2}`, "a"},
		{`{"a":"\u00e9\ud800"}`, "a"},
		{`{"a":1e400}`, "a"},
		{`[1,[2,3]]`, "1.0"},
	} {
		f.Add([]byte(seed[0]), seed[1])
	}
	f.Fuzz(func(t *testing.T, body []byte, path string) {
		if path == "" || strings.Contains(path, "..") || strings.HasPrefix(path, ".") || strings.HasSuffix(path, ".") || len(path) > keylimit.PartLen {
			return
		}
		fn := keyfunc.JSONLimit(path, 1<<16)
		req := httptest.NewRequest("POST", "/", bytes.NewReader(body))
		parts, _, err := fn.HTTP(req)
		checkResult(t, fn, parts, err)
		if err != nil {
			return
		}
		var doc any
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		if dec.Decode(&doc) != nil {
			return
		}
		for _, seg := range strings.Split(path, ".") {
			switch d := doc.(type) {
			case map[string]any:
				doc = d[seg]
			case []any:
				i, err := strconv.Atoi(seg)
				if err != nil || i < 0 || i >= len(d) {
					return
				}
				doc = d[i]
			default:
				return
			}
		}
		var want string
		switch v := doc.(type) {
		case string:
			want = canonText(v)
		case bool:
			want = strconv.FormatBool(v)
		case json.Number:
			want = canon(string(v))
		default:
			return
		}
		if parts[1] != want {
			t.Fatalf("JSON(%q) of %q = %q, encoding/json says %q", path, body, parts[1], want)
		}
	})
}

// canon is the canonical form of a JSON number, computed independently of
// the package, exactly: integral values in decimal, others in plain decimal
// notation without trailing zeros. Only for numbers whose exponent is
// small (the package refuses others).
func canon(s string) string {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		panic("not a number: " + s)
	}
	if r.IsInt() {
		return r.Num().String()
	}
	// A decimal fraction's denominator is 2^a·5^b: max(a, b) digits after
	// the point write it exactly, the last of them not zero.
	d := new(big.Int).Set(r.Denom())
	n := 0
	for _, p := range []int64{2, 5} {
		k, q, m := 0, new(big.Int), new(big.Int)
		for d.Sign() != 0 {
			q.QuoRem(d, big.NewInt(p), m)
			if m.Sign() != 0 {
				break
			}
			d.Set(q)
			k++
		}
		n = max(n, k)
	}
	return r.FloatString(n)
}

// canonText is the canonical form of any key value, computed independently
// of the package: a decimal integer in canonical decimal, whatever
// github.com/google/uuid parses as a UUID in its lower-case 8-4-4-4-12 form,
// anything else as it is.
func canonText(s string) string {
	if intRE.MatchString(s) {
		n, _ := new(big.Int).SetString(strings.TrimPrefix(s, "+"), 10)
		return n.String()
	}
	if u, err := uuid.Parse(s); err == nil {
		return u.String()
	}
	return s
}

var intRE = regexp.MustCompile(`^[+-]?[0-9]+$`)
