package redisengine

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/enginetest"
	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
)

// serverMajor returns the major version of the Redis server behind rdb:
// 0 for miniredis, which does not say.
func serverMajor(t *testing.T, rdb redis.UniversalClient) int {
	t.Helper()
	v, _ := serverVersion(context.Background(), rdb)
	major, _ := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
	return major
}

// TestScriptsDeclareEveryKey checks the promise that the scripts are sent
// with a "#!lua" shebang wherever the server reads one, so that Redis 7
// refuses a script that touches a key it did not declare (in a Cluster),
// and that they run unchanged without it where the server does not
// (miniredis, Redis 6). On a real one-node cluster a shebang script that
// touches an undeclared key is refused, which shows the check is on; the
// engine's scripts acquire, re-enter, hand over and release there.
func TestScriptsDeclareEveryKey(t *testing.T) {
	for _, b := range redistest.ClusterBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{b.Addr}})
			t.Cleanup(func() { _ = rdb.Close() })
			shebang := serverMajor(t, rdb) >= 7
			if b.Real() && shebang {
				err := rdb.Eval(ctx, "#!lua\nreturn redis.call('GET', 'some-other-key')", []string{"declared"}).Err()
				if err == nil {
					t.Fatal("a shebang script touching an undeclared key ran on the cluster: the check the engine relies on is off")
				}
				t.Logf("undeclared key refused: %v", err)
			}
			prefix := redistest.Prefix(t)
			l := lockerOn(t, rdb, prefix, Options{})
			other := lockerOn(t, rdb, prefix, Options{})
			key := mustKey(t, "declared", "1")
			outer, err := l.Acquire(ctx, key, lifecycle.Policy{Wait: lockcore.FailFast})
			if err != nil {
				t.Fatal(err)
			}
			inner, err := other.Acquire(enginetest.WithToken(ctx, outer.Token()), key, lifecycle.Policy{Wait: lockcore.FailFast})
			if err != nil || inner.Fence() != outer.Fence() {
				t.Fatalf("re-entry from another Engine: %v, fence %d of %d", err, inner.Fence(), outer.Fence())
			}
			got, errc := acquireAsync(other, key, 5*time.Second)
			if err := inner.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := outer.Release(ctx); err != nil {
				t.Fatal(err)
			}
			w := awaitLease(t, got, errc, 5*time.Second, "waiter handed the lock")
			if err := w.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if info := inspect(t, l, key); len(info.Holders) > 0 {
				t.Fatalf("still held: %+v", info)
			}
			if plain := l.run.plain.Load(); plain == shebang {
				t.Fatalf("server major version %d: scripts sent without shebang = %v", serverMajor(t, rdb), plain)
			}
			sha := l.run.sha(acquireScript)
			if ok, err := rdb.ScriptExists(ctx, sha).Result(); err != nil || !ok[0] {
				t.Fatalf("the server does not have the script the engine sent (%s): %v %v", sha, ok, err)
			}
		})
	}
}

// TestParseHold checks the Go reading of the hold's format against the
// values the scripts write.
func TestParseHold(t *testing.T) {
	for _, c := range []struct {
		v  string
		h  holdValue
		ok bool
	}{
		{"0123456789abcdef0123456789abcdef 1732345678901234 1732345678901299 0 a1.1",
			holdValue{"0123456789abcdef0123456789abcdef", 1732345678901234, 1732345678901299, []string{"a1.1"}}, true},
		{"tok_tok_tok_tok_ 7 1732345678901299 1 a1.1 b2.2 c3.3",
			holdValue{"tok_tok_tok_tok_", 7, 1732345678901299, []string{"a1.1", "b2.2", "c3.3"}}, true},
		{"tok 7 1732345678901299 2 a1.1", holdValue{}, false},
		{"tok x 1732345678901299 0 a1.1", holdValue{}, false},
		{"tok 7 x 0 a1.1", holdValue{}, false},
		{"tok 7 0 a1.1", holdValue{}, false}, // the format before since
		{"tok 7 1732345678901299 0", holdValue{}, false},
		{"", holdValue{}, false},
	} {
		h, ok := parseHold(c.v)
		if !reflect.DeepEqual(h, c.h) || ok != c.ok {
			t.Errorf("parseHold(%q) = %+v %v, want %+v %v", c.v, h, ok, c.h, c.ok)
		}
	}
}

// TestCheck: on a working Redis, Check finds the subscription up, the
// scripts compiled (with or without shebang, as the server needs) and
// nothing wrong; after Close it says ErrClosed.
func TestCheck(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		l, err := New(b.Client(t), Options{Prefix: redistest.Prefix(t)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := l.Check(ctx); err != nil {
			t.Fatalf("Check: %v", err)
		}
		if plain := l.run.plain.Load(); plain == b.Real() {
			t.Fatalf("after Check, scripts without shebang = %v on %s", plain, b.Name)
		}
		_ = l.Close()
		if err := l.Check(ctx); !errors.Is(err, lockcore.ErrClosed) {
			t.Fatalf("Check after Close: %v", err)
		}
	})
}
