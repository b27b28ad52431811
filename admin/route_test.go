package admin

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/routelock/lock/lockcore"
)

func TestPathKey(t *testing.T) {
	for seg, want := range map[string]string{
		"productID:42":            "productID:42",
		"a%253Ab:c":               "a%3Ab:c", // the key's own escape, path-escaped
		"x:%257B%257D":            "x:%7B%7D",
		"%6Cocks":                 "locks",
		"%72esults":               "results",
		"%64rop":                  "drop",
		"%2E%2E":                  "..",
		"userID:%3Cscript%3E%2Fx": "userID:<script>/x",
	} {
		k, err := pathKey(seg)
		if err != nil || k.String() != want {
			t.Errorf("pathKey(%q) = %q, %v; want %q", seg, k, err, want)
		}
	}
	for _, seg := range []string{"", ":", "a:", "a::b", "a:b:c:d:e:f:g:h:i", "%", "%zz", "a%253ab", "name:a%20b", strings.Repeat("x", 257)} {
		if k, err := pathKey(seg); !errors.Is(err, lockcore.ErrInvalidKey) {
			t.Errorf("pathKey(%.40q) = %q, %v; want ErrInvalidKey", seg, k, err)
		}
	}
}

// FuzzKeySegment: every key NewKey makes comes back from its URL path
// segment, which the routes find.
func FuzzKeySegment(f *testing.F) {
	f.Add("productID", "42", "")
	f.Add("a:b", "%3A", "{x}")
	f.Add("locks", "..", "release")
	f.Add("results", "drop", "idempotency")
	f.Add("<script>", "a/b", "é\x00")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		parts := []string{a}
		for _, p := range []string{b, c} {
			if p != "" {
				parts = append(parts, p)
			}
		}
		k, err := lockcore.NewKey(parts...)
		if err != nil {
			return
		}
		seg := keySegment(k.String())
		rt := parseRoute("/locks/" + seg + "/release")
		if rt.kind != routeRelease || rt.key != seg {
			t.Fatalf("route of %q: %+v", seg, rt)
		}
		rt = parseRoute("/locks/" + seg)
		if rt.kind != routeLock || rt.key != seg {
			t.Fatalf("route of %q: %+v", seg, rt)
		}
		rt = parseRoute("/results/" + seg + "/drop")
		if rt.kind != routeDrop || rt.key != seg {
			t.Fatalf("route of %q: %+v", seg, rt)
		}
		got, err := pathKey(seg)
		if err != nil || got != k {
			t.Fatalf("pathKey(%q) = %q, %v", seg, got, err)
		}
		if strings.Contains(seg, "/") || seg == "." || seg == ".." {
			t.Fatalf("segment %q", seg)
		}
		if u, err := url.Parse("/admin/locks/" + seg); err != nil || u.EscapedPath() != "/admin/locks/"+seg {
			t.Fatalf("%q does not survive URL parsing: %v %v", seg, u, err)
		}
	})
}

func TestParseRoute(t *testing.T) {
	for p, want := range map[string]route{
		"":                          {kind: routeIndex, tail: 1},
		"/":                         {kind: routeIndex, tail: 1},
		"/locks":                    {kind: routeList, tail: 1},
		"locks":                     {kind: routeList, tail: 1},
		"locks/k":                   {kind: routeLock, key: "k", tail: 2},
		"/gates":                    {kind: routeGates, tail: 1},
		"/gates/k/open":             {kind: routeOpen, key: "k", tail: 3},
		"/locks/k":                  {kind: routeLock, key: "k", tail: 2},
		"/locks/k/release":          {kind: routeRelease, key: "k", tail: 3},
		"/locks/release":            {kind: routeNotFound, tail: 2}, // the key release is %72elease
		"/locks/%72elease":          {kind: routeLock, key: "%72elease", tail: 2},
		"/locks/%6Cocks/release":    {kind: routeRelease, key: "%6Cocks", tail: 3},
		"/locks/sku:a%2Fb/release":  {kind: routeRelease, key: "sku:a%2Fb", tail: 3},
		"/locks/productID:42?x=1#y": {kind: routeLock, key: "productID:42?x=1#y", tail: 2},
		"/results":                  {kind: routeResults, tail: 1},
		"/results/k/drop":           {kind: routeDrop, key: "k", tail: 3},
		"/results/drop":             {kind: routeNotFound, tail: 2},
		"/results/%64rop/drop":      {kind: routeDrop, key: "%64rop", tail: 3},
		"/results/drop/drop":        {kind: routeNotFound, tail: 3},
		"/results/k":                {kind: routeNotFound, tail: 2},
		"/locks/results":            {kind: routeNotFound, tail: 2}, // the key results is %72esults
		// Not the handler's: only its documented routes are.
		"/admin":                       {kind: routeNotFound, tail: 1},
		"/admin/":                      {kind: routeNotFound, tail: 2},
		"/locks/":                      {kind: routeNotFound, tail: 2},
		"/locks/k/release/":            {kind: routeNotFound, tail: 4},
		"/locks//release":              {kind: routeNotFound, tail: 3},
		"/other":                       {kind: routeNotFound, tail: 1},
		"/locks/k/release/x":           {kind: routeNotFound, tail: 4},
		"/locks/k/other":               {kind: routeNotFound, tail: 3},
		"/locks/locks/k/release":       {kind: routeNotFound, tail: 4},
		"/admin/locks/k/release":       {kind: routeNotFound, tail: 4},
		"/debug/locks/locks/k/release": {kind: routeNotFound, tail: 5},
	} {
		if got := parseRoute(p); got != want {
			t.Errorf("parseRoute(%q) = %+v, want %+v", p, got, want)
		}
	}
}
