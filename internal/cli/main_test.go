package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/routelock/lock/internal/operate"
	"github.com/routelock/lock/internal/redisconf"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// fakeOp is an in-memory lockcore.Operator.
type fakeOp struct {
	mu      sync.Mutex
	locks   map[string]lockcore.Info
	err     error
	prefix  string
	limit   int
	reasons []string
}

func (f *fakeOp) List(_ context.Context, prefix string, limit int) ([]lockcore.Info, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.prefix, f.limit = prefix, limit
	if f.err != nil {
		return nil, false, f.err
	}
	var keys []string
	for k := range f.locks {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	more := limit > 0 && len(keys) > limit
	if more {
		keys = keys[:limit]
	}
	var out []lockcore.Info
	for _, k := range keys {
		out = append(out, f.locks[k])
	}
	return out, more, nil
}

func (f *fakeOp) Inspect(_ context.Context, key lockcore.Key) (lockcore.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return lockcore.Info{}, f.err
	}
	return f.locks[key.String()], nil // the zero Info, without its key, for a free lock
}

func (f *fakeOp) Revoke(_ context.Context, key lockcore.Key, reason string) (lockcore.Revocation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reasons = append(f.reasons, reason)
	if f.err != nil {
		return lockcore.Revocation{}, f.err
	}
	in, ok := f.locks[key.String()]
	if !ok || len(in.Holders) == 0 {
		return lockcore.Revocation{}, fmt.Errorf("fake: %w", lockcore.ErrNotHeld)
	}
	delete(f.locks, key.String())
	return lockcore.Revocation{Key: in.Key, Owner: in.Holders[0].Owner, Fence: in.Fence, NewFence: in.Fence + 1, Reason: reason}, nil
}

var now = time.Now()

func sampleOp() *fakeOp {
	return &fakeOp{locks: map[string]lockcore.Info{
		"productID:42": {
			Key: "productID:42",
			Holders: []lockcore.Holder{{Owner: "3f9a1c2e", Count: 2, Instances: []string{"e1a2b3c4d5e6f708"}, Names: []string{"shop-7f9c-a"},
				Route: "/products/{productID}/buy", Trace: "4bf92f3577b34da6a3ce929d0e0e4736", Since: now.Add(-1500 * time.Millisecond)}},
			Fence:     1017,
			LastFence: 1019,
			TTL:       8250 * time.Millisecond,
			Waiters: []lockcore.Waiter{
				{Instance: "9b8c7d6e5f403122", Since: now.Add(-time.Second), Deadline: now.Add(4 * time.Second)},
				{Instance: "e1a2b3c4d5e6f708", Name: "shop-7f9c-a", Route: "/shop.Inventory/Reserve", Trace: "0af7651916cd43dd8448eb211c80319c", Since: now.Add(-500 * time.Millisecond), Deadline: now.Add(1500 * time.Millisecond)},
			},
			Audit: []lockcore.Revocation{{Key: "productID:42", Owner: "77aa00bb", Fence: 1001, NewFence: 1002, Reason: "stuck\x1b[31m after deploy", At: now.Add(-time.Hour)}},
		},
		"orderID:1234567": {
			Key:     "orderID:1234567",
			Holders: []lockcore.Holder{{Owner: "c0ffee11", Count: 1, Instances: []string{"9b8c7d6e5f403122"}}},
			Fence:   5, LastFence: 5, TTL: 2 * time.Second,
		},
		"cartID:9": {Key: "cartID:9", Waiters: []lockcore.Waiter{{Instance: "aaaa", Since: now, Deadline: now.Add(time.Second)}}},
	}}
}

// withOp makes run use op instead of Redis, and counts the opens.
func withOp(t *testing.T, op lockcore.Operator) *int {
	t.Helper()
	var opened int
	saved := open
	open = func(func(string) string, string) (lockcore.Operator, string, func(), error) {
		opened++
		return op, "Redis at 127.0.0.1:6379", func() {}, nil
	}
	timeNow = func() time.Time { return now }
	t.Cleanup(func() { open, timeNow = saved, time.Now })
	return &opened
}

type result struct {
	code           int
	stdout, stderr string
}

func runWith(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var out, errw strings.Builder
	code := run(t.Context(), args, func(k string) string { return env[k] }, &out, &errw)
	return result{code, out.String(), errw.String()}
}

func TestUsage(t *testing.T) {
	opened := withOp(t, sampleOp())
	for _, c := range []struct {
		args []string
		code int
		err  string
	}{
		{nil, 2, "no command"},
		{[]string{"frob"}, 2, `unknown command "frob"`},
		{[]string{"release", "productID:42"}, 2, "release needs -reason"},
		{[]string{"release", "productID:42", "--reason", " \t "}, 2, "release needs -reason"},
		{[]string{"release", "productID:42", "--reason", "a\nb"}, 2, "control characters"},
		{[]string{"release", "productID:42", "--reason", strings.Repeat("x", operate.MaxReasonLen+1)}, 2, "longer than 256"},
		{[]string{"release", "--reason", "x"}, 2, "one KEY, not 0"},
		{[]string{"inspect"}, 2, "one KEY, not 0"},
		{[]string{"inspect", "a", "b"}, 2, "one KEY, not 2"},
		{[]string{"inspect", "a::b"}, 2, "invalid key"},
		{[]string{"inspect", "a:%zz"}, 2, "invalid key"},
		{[]string{"inspect", "name:a b"}, 2, "invalid key"}, // ls prints name:a%20b
		{[]string{"ls", "a", "b"}, 2, "at most one PREFIX"},
		{[]string{"ls", "-nope"}, 2, "flag provided but not defined: -nope"},
		{[]string{"inspect", "-limit", "5", "k"}, 2, "not defined: -limit"},
		{[]string{"-timeout", "0", "ls"}, 2, "-timeout must be positive"},
		{[]string{"ls", "-limit", "-1"}, 2, "-limit must not be negative"},
		{[]string{"-h"}, 0, "usage: routelock [flags] ls [PREFIX]"},
		{[]string{"help"}, 0, "Exit status: 0 done, 1 error, 2 usage, 3 release of a lock nobody holds\nor drop of a result not stored."},
		{[]string{"release", "-h"}, 0, "-reason"},
	} {
		r := runWith(t, nil, c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.err) || r.stdout != "" {
			t.Errorf("%q: exit %d, stderr %q, stdout %q; want %d with %q", c.args, r.code, r.stderr, r.stdout, c.code, c.err)
		}
	}
	if *opened != 0 {
		t.Errorf("usage errors connected %d times", *opened)
	}
}

// columns returns the byte offsets where each of the fields of line
// starts, fields being separated by two or more spaces.
func columns(line string) []int {
	var at []int
	for i := 0; i < len(line); i++ {
		if line[i] != ' ' && (i == 0 || (i >= 2 && line[i-1] == ' ' && line[i-2] == ' ')) {
			at = append(at, i)
		}
	}
	return at
}

func TestOutput(t *testing.T) {
	op := sampleOp()
	withOp(t, op)

	r := runWith(t, nil, "ls")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("ls: %d %q", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	want := []string{
		"KEY              HOLDER    INSTANCE                        ROUTE                      COUNT  FENCE  TTL    HELD FOR  WAITERS",
		"cartID:9         -         -                               -                          -      -      -      -         1",
		"orderID:1234567  c0ffee11  9b8c7d6e5f403122                -                          1      5      2s     -         0",
		"productID:42     3f9a1c2e  shop-7f9c-a (e1a2b3c4d5e6f708)  /products/{productID}/buy  2      1017   8.25s  1.5s      2",
	}
	if !slices.Equal(lines, want) {
		t.Errorf("ls:\n%s\nwant:\n%s", r.stdout, strings.Join(want, "\n"))
	}
	for _, l := range lines[1:] {
		if !slices.Equal(columns(l), columns(lines[0])) {
			t.Errorf("misaligned: %q against %q", l, lines[0])
		}
	}
	if op.prefix != "" || op.limit != 1000 {
		t.Errorf("ls asked for %q, %d", op.prefix, op.limit)
	}

	// Flags after the command, a prefix, and a limit the locks exceed.
	r = runWith(t, nil, "ls", "product", "-limit", "1")
	if r.code != 0 || op.prefix != "product" || op.limit != 1 {
		t.Errorf("ls product -limit 1: %d; asked for %q, %d", r.code, op.prefix, op.limit)
	}
	r = runWith(t, nil, "ls", "-limit", "2")
	if r.code != 0 || !strings.Contains(r.stderr, "more locks than -limit 2") {
		t.Errorf("ls -limit 2: %d %q", r.code, r.stderr)
	}
	r = runWith(t, nil, "ls", "nothing:")
	if r.code != 0 || r.stdout != "no lock is held or awaited\n" {
		t.Errorf("ls nothing: %d %q", r.code, r.stdout)
	}

	r = runWith(t, nil, "inspect", "productID:42")
	if r.code != 0 {
		t.Fatalf("inspect: %d %q", r.code, r.stderr)
	}
	for _, want := range []string{
		"key:         productID:42\n",
		"state:       held\n",
		"holder:      3f9a1c2e, 2 acquisitions, on shop-7f9c-a (e1a2b3c4d5e6f708), since " + now.Add(-1500*time.Millisecond).UTC().Format("2006-01-02T15:04:05.000Z") + " (1.5s ago)\n",
		"  route:     /products/{productID}/buy\n",
		"  trace:     4bf92f3577b34da6a3ce929d0e0e4736\n",
		"fence:       1017\n",
		"ttl:         8.25s\n",
		"last fence:  1019\n",
		"waiters:     2\n",
		"  #  INSTANCE                        MODE       QUEUED     GIVES UP  ROUTE                    TRACE\n",
		"  1  9b8c7d6e5f403122                exclusive  1s ago     in 4s     -                        -\n",
		"  2  shop-7f9c-a (e1a2b3c4d5e6f708)  exclusive  500ms ago  in 1.5s   /shop.Inventory/Reserve  0af7651916cd43dd8448eb211c80319c\n",
		"force-releases: 1\n",
		"1001   1002       stuck\\x1b[31m after deploy\n", // no escape sequence reaches the terminal
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("inspect lacks %q:\n%s", want, r.stdout)
		}
	}
	r = runWith(t, nil, "inspect", "productID:43")
	if r.code != 0 || r.stdout != "key:         productID:43\nstate:       free\nlast fence:  0\nwaiters:     0\nforce-releases: 0\n" {
		t.Errorf("inspect free: %d\n%s", r.code, r.stdout)
	}

	// JSON, with -json before or after the command.
	r = runWith(t, nil, "-json", "ls")
	var l operate.List
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &l) != nil || len(l.Locks) != 3 || l.Locks[2].Holders[0].Owner != "3f9a1c2e" || l.Locks[2].TTLMillis != 8250 {
		t.Errorf("-json ls: %d %s", r.code, r.stdout)
	}
	r = runWith(t, nil, "inspect", "productID:42", "-json")
	var one operate.Lock
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &one) != nil || one.Key != "productID:42" || len(one.Waiters) != 2 || !strings.Contains(r.stdout, `"last_fence": 1019`) {
		t.Errorf("inspect -json: %d %s", r.code, r.stdout)
	}
	r = runWith(t, nil, "inspect", "-json", "productID:43")
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &one) != nil || one.Key != "productID:43" || one.Held {
		t.Errorf("inspect -json free: %d %s", r.code, r.stdout)
	}

	r = runWith(t, nil, "release", "--reason", "  wedged on payments ", "orderID:1234567")
	if r.code != 0 || r.stdout != "released orderID:1234567: it was held by owner c0ffee11 with fence 5; the key's last fencing token is now 6\n" || op.reasons[0] != "wedged on payments" {
		t.Errorf("release: %d %q %q; reasons %q", r.code, r.stdout, r.stderr, op.reasons)
	}
	r = runWith(t, nil, "release", "-json", "productID:42", "-reason=why")
	var rev operate.Revocation
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rev) != nil || rev.Key != "productID:42" || rev.NewFence != 1018 || rev.Reason != "why" {
		t.Errorf("release -json: %d %s", r.code, r.stdout)
	}
	// "--" ends the flags: a key may start with '-'.
	op.locks["-1"] = lockcore.Info{Key: "-1", Holders: []lockcore.Holder{{Owner: "o", Count: 1}}, Fence: 1}
	if r = runWith(t, nil, "release", "-reason", "x", "--", "-1"); r.code != 0 {
		t.Errorf("release -- -1: %d %q", r.code, r.stderr)
	}
}

func TestErrors(t *testing.T) {
	op := sampleOp()
	withOp(t, op)
	r := runWith(t, nil, "release", "productID:43", "-reason", "x")
	if r.code != 3 || r.stderr != "routelock: productID:43 is not held\n" || r.stdout != "" {
		t.Errorf("release of a free key: %d %q %q", r.code, r.stderr, r.stdout)
	}
	op.err = fmt.Errorf("%w: dial tcp 127.0.0.1:6379: connection refused", lockcore.ErrUnavailable)
	for _, args := range [][]string{{"ls"}, {"inspect", "k"}, {"release", "k", "-reason", "x"}} {
		r := runWith(t, nil, args...)
		if r.code != 1 || !strings.HasPrefix(r.stderr, "routelock: Redis at 127.0.0.1:6379 is unavailable: ") || r.stdout != "" {
			t.Errorf("%q while unavailable: %d %q", args, r.code, r.stderr)
		}
	}
	op.err = fmt.Errorf("%w: WRONGPASS", lockcore.ErrMisconfigured)
	if r := runWith(t, nil, "ls"); r.code != 1 || !strings.Contains(r.stderr, "refuses the engine") {
		t.Errorf("misconfigured: %d %q", r.code, r.stderr)
	}
}

func TestScrub(t *testing.T) {
	for _, c := range []struct{ msg, raw, want string }{
		{"x hunter2 y", "redis://u:hunter2@h:1/0", "x xxxxx y"},
		{"x u:hunter2 y", "redis://u:hunter2@h:1/0", "x xxxxx y"},
		{"x hunter2 y", "redis://u:hunter%32@h:1/0", "x xxxxx y"},
		{"x y", "redis://h:1/0", "x y"},
		{"x y", "not a url", "x y"},
		{"x hunter2 y", "redis://s1:26379?master_name=m&password=hunter2", "x xxxxx y"},
		{"x u:hunter2 y", "redis://u:hunter2@h1:1?addr=h2:1", "x xxxxx y"},
	} {
		if got := redisconf.Scrub(c.msg, c.raw); got != c.want {
			t.Errorf("scrub(%q, %q) = %q, want %q", c.msg, c.raw, got, c.want)
		}
	}
}

// TestHeldForNeverNegative: a hold whose start, by its engine's clock, is
// a few ms after the server's now is shown as held for 0s, not -5ms.
func TestHeldForNeverNegative(t *testing.T) {
	now := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	var out strings.Builder
	p := newPrinter(&out, now)
	p.list([]lockcore.Info{{Key: "productID:7", Fence: 3, TTL: time.Second,
		Holders: []lockcore.Holder{{Owner: "o", Count: 1, Since: now.Add(5 * time.Millisecond)}}}})
	if err := p.err(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "-5ms") || !strings.Contains(out.String(), " 0s ") {
		t.Errorf("held for a negative time:\n%s", out.String())
	}
}
