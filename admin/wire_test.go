package admin_test

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/routelock/lock/admin"
	"github.com/routelock/lock/lockcore"
)

var update = flag.Bool("update", false, "rewrite the golden files of TestWireFormat")

// TestWireFormat pins the JSON bodies byte for byte against the files in
// testdata: clients in any language parse them, so a field's name, order,
// value form, escaping or the indentation changes only on purpose. The
// answers cover every type of the schema: a list, a held lock with
// waiters and an audit record, a holder without a start time, a free key,
// a key and a reason that need escaping, a revocation and an error.
func TestWireFormat(t *testing.T) {
	op := newMemOp()
	sample(op)
	now := op.now
	op.set(lockcore.Info{
		Key:     "cartID:a%3Ab",
		Waiters: []lockcore.Waiter{{Instance: "aaaa", Since: now.In(time.FixedZone("CET", 3600))}},
		Audit:   []lockcore.Revocation{{Key: "cartID:a%3Ab", Owner: "0badc0de", Fence: 3, NewFence: 4, Reason: `<b>"held" & stuck</b> — é`}},
	})
	srv := mount(t, admin.Handler(op, admin.Config{}))
	for _, c := range []struct {
		name, method, path, body string
		code                     int
	}{
		{"list", "GET", "/admin/locks", "", 200},
		{"lock", "GET", "/admin/locks/productID:42", "", 200},
		{"escaped", "GET", "/admin/locks/cartID:a%253Ab", "", 200},
		{"free", "GET", "/admin/locks/productID:43", "", 200},
		{"error", "GET", "/admin/locks?limit=0", "", 400},
		{"revocation", "POST", "/admin/locks/productID:42/release", `{"reason": "holder wedged on payments"}`, 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := do(t, srv, c.method, c.path, c.body, "Content-Type", jsonCT)
			if r.code != c.code || r.header.Get("Content-Type") != "application/json; charset=utf-8" {
				t.Errorf("%s %s: %d %s", c.method, c.path, r.code, r.header.Get("Content-Type"))
			}
			file := filepath.Join("testdata", c.name+".json")
			if *update {
				if err := os.WriteFile(file, []byte(r.body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if r.body != string(want) {
				t.Errorf("%s %s answers\n%s\nwant (%s)\n%s", c.method, c.path, r.body, file, want)
			}
		})
	}
}
