package cli

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/routelock/lock/lockcore"
)

var update = flag.Bool("update", false, "rewrite the golden files of TestJSONFormat")

// TestJSONFormat pins the -json output byte for byte against the files in
// testdata: scripts parse it, and it is the schema of the admin handler's
// JSON API, so it changes only on purpose.
func TestJSONFormat(t *testing.T) {
	at := time.Date(2026, 11, 23, 14, 2, 3, 456789000, time.FixedZone("CET", 3600))
	op := &fakeOp{locks: map[string]lockcore.Info{
		"productID:42": {
			Key: "productID:42",
			Holders: []lockcore.Holder{{Owner: "3f9a1c2e", Count: 2, Instances: []string{"e1a2b3c4d5e6f708"}, Names: []string{"shop-7f9c-a"},
				Route: "/products/{productID}/buy", Trace: "4bf92f3577b34da6a3ce929d0e0e4736", Since: at.Add(-1500 * time.Millisecond)}},
			Fence:     1017,
			LastFence: 1019,
			TTL:       8250 * time.Millisecond,
			Waiters: []lockcore.Waiter{{Instance: "9b8c7d6e5f403122", Name: "shop-7f9c-b", Route: "/products/{productID}/buy",
				Trace: "0af7651916cd43dd8448eb211c80319c", Since: at.Add(-time.Second), Deadline: at.Add(4 * time.Second)}},
			Audit: []lockcore.Revocation{{Key: "productID:42", Owner: "77aa00bb", Fence: 1001, NewFence: 1002, Reason: "stuck\x1b[31m <after> & deploy", At: at.Add(-time.Hour)}},
		},
		"orderID:1234567": {
			Key:     "orderID:1234567",
			Holders: []lockcore.Holder{{Owner: "c0ffee11", Count: 1}},
			Fence:   5, LastFence: 5, TTL: 2 * time.Second,
		},
	}}
	withOp(t, op)
	for _, c := range []struct {
		name string
		args []string
	}{
		{"ls", []string{"-json", "ls"}},
		{"inspect", []string{"-json", "inspect", "productID:42"}},
		{"free", []string{"-json", "inspect", "productID:43"}},
		{"release", []string{"-json", "release", "orderID:1234567", "-reason", "wedged"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runWith(t, nil, c.args...)
			if r.code != 0 || r.stderr != "" {
				t.Errorf("%q: %d %q", c.args, r.code, r.stderr)
			}
			file := filepath.Join("testdata", c.name+".json")
			if *update {
				if err := os.WriteFile(file, []byte(r.stdout), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if r.stdout != string(want) {
				t.Errorf("%q prints\n%s\nwant (%s)\n%s", c.args, r.stdout, file, want)
			}
		})
	}
}
