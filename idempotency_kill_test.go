package lock_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	lock "github.com/routelock/lock"
	"github.com/routelock/lock/internal/idem"
	"github.com/routelock/lock/internal/redistest"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
	"github.com/routelock/lock/middleware"
)

// idemChildEnv names the Redis that the test binary, run again with it set,
// serves an idempotent route on as another app instance (idemChildMain).
const idemChildEnv = "ROUTELOCK_IDEM_CHILD"

// halfWritten is what the child's handler writes before it blocks: a
// response that must never reach anyone.
const halfWritten = "half-written by the killed instance"

// idemChildMain is the other app instance: it serves POST
// /payments/{account}, idempotent with a 500 ms lease, on a free loopback
// port, and says "listening <addr>". Its handler writes part of a response,
// says "started <fencing token>", and blocks for good: the test kills the
// process.
func idemChildMain() int {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(idemChildEnv)}) // go-redis's defaults
	l := lock.NewRedis(rdb, redisengine.Options{Prefix: os.Getenv(idemChildEnv + "_PREFIX")})
	r := chi.NewRouter()
	r.With(l.Idempotent(lock.Wait(10*time.Second), lock.TTL(500*time.Millisecond))).Post("/payments/{account}", func(w http.ResponseWriter, r *http.Request) {
		fence, _ := lock.FencingToken(r.Context())
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%q`, halfWritten)
		fmt.Println("started", fence)
		<-make(chan struct{}) // until the process is killed
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("listening", ln.Addr())
	_ = http.Serve(ln, r)
	return 1
}

// idemChild is a running idemChildMain.
type idemChild struct {
	cmd   *exec.Cmd
	lines chan string // its stdout, closed at its end
}

func startIdemChild(t *testing.T, addr, prefix string) *idemChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), idemChildEnv+"="+addr, idemChildEnv+"_PREFIX="+prefix)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &idemChild{cmd: cmd, lines: make(chan string, 16)}
	go func() {
		defer close(c.lines)
		s := bufio.NewScanner(out)
		for s.Scan() {
			c.lines <- s.Text()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return c
}

// line returns the child's next line, failing the test after 10 s.
func (c *idemChild) line(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			t.Fatal("the child exited")
		}
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("the child said nothing for 10s")
	}
	return ""
}

// TestIdempotencyKilledInstance: an app instance in a process of its own
// starts the handler of key K (500 ms lease) and is killed (SIGKILL) in the
// middle of it. A duplicate sent to another instance before the kill
// waits in line, and one sent after it too; once the killed one's lease
// has run out in Redis, exactly one of them runs the handler (the fenced
// store counts one write, with a fencing token above the killed one's),
// the other gets its response replayed, and so does a later retry: what
// the killed handler had written is never stored nor replayed, and its
// own client gets no response at all.
func TestIdempotencyKilledInstance(t *testing.T) {
	srv := redistest.OwnReal(t)
	if srv == nil {
		return
	}
	prefix := redistest.Prefix(t)
	store := newFencedStore()
	var ls [2]*lock.Locker
	var apps [2]string
	for i := range ls {
		rdb := redistest.At(srv.Addr).Universal(t)
		ls[i] = lock.NewRedis(rdb, redisengine.Options{Prefix: prefix})
		t.Cleanup(func() { _ = ls[i].Close() })
		apps[i] = paymentsOn(t, ls[i], store, middleware.IdempotencyConfig{Policy: lock.Wait(10 * time.Second)}).URL
	}
	child := startIdemChild(t, srv.Addr, prefix)
	var childURL string
	if _, err := fmt.Sscanf(child.line(t), "listening %s", &childURL); err != nil {
		t.Fatal(err)
	}
	const ik, path, body = "pay-killed-1", "/payments/acct-1", "amount=7"
	k := idemKey(t, "/payments/{account}", ik)
	client := &http.Client{Timeout: 20 * time.Second}

	type sent struct {
		a    answer
		err  error
		done time.Time
	}
	send := func(url string) <-chan sent {
		c := make(chan sent, 1)
		go func() {
			a, err := idemTry(client, url+path, ik, body)
			c <- sent{a, err, time.Now()}
		}()
		return c
	}
	first := send("http://" + childURL)
	var childFence int64
	if _, err := fmt.Sscanf(child.line(t), "started %d", &childFence); err != nil {
		t.Fatal(err)
	}
	if info := inspect(t, ls[0], k); len(info.Holders) != 1 || info.Fence != childFence {
		t.Fatalf("the killed instance's hold in Redis: %+v, want its fence %d", info, childFence)
	}
	before := send(apps[0])
	eventually(t, 10*time.Second, "the duplicate sent before the kill waits in line", func() bool {
		return len(inspect(t, ls[0], k).Waiters) == 1
	})
	if err := child.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.cmd.Wait()
	killed := time.Now()
	after := send(apps[1])

	wait := func(c <-chan sent, what string) sent {
		t.Helper()
		select {
		case s := <-c:
			return s
		case <-time.After(15 * time.Second):
			t.Fatalf("%s: no answer 15s after the kill", what)
		}
		return sent{}
	}
	if s := wait(first, "the killed instance's client"); s.err == nil {
		t.Errorf("the killed instance's client got %d %q, want no response", s.a.status, s.a.body)
	}
	b, a := wait(before, "the duplicate sent before the kill"), wait(after, "the duplicate sent after the kill")
	retry := idemPost(t, client, apps[0]+path, ik, body)
	for _, s := range []struct {
		what string
		a    answer
		err  error
	}{{"before the kill", b.a, b.err}, {"after the kill", a.a, a.err}, {"the retry", retry, nil}} {
		if s.err != nil || s.a.status != http.StatusCreated || strings.Contains(string(s.a.body), halfWritten) {
			t.Errorf("the duplicate %s: %d %q %v; want 201 from a run of its own instance", s.what, s.a.status, s.a.body, s.err)
		}
	}
	if n := store.writes[ik]; n != 1 {
		t.Errorf("the handler wrote %d times after the kill, want once", n)
	}
	if store.fence[ik] <= childFence {
		t.Errorf("the run after the kill wrote with fencing token %d, not above the killed one's %d", store.fence[ik], childFence)
	}
	if b.a.replayed == a.a.replayed || !retry.replayed || string(b.a.body) != string(a.a.body) || string(retry.body) != string(b.a.body) {
		t.Errorf("answers %q (replayed %v), %q (replayed %v), retry %q (replayed %v); want one run, its response replayed to the others",
			b.a.body, b.a.replayed, a.a.body, a.a.replayed, retry.body, retry.replayed)
	}
	ran := b.done
	if b.a.replayed {
		ran = a.done
	}
	t.Logf("the duplicates answered %v and %v after the kill (500 ms lease)", b.done.Sub(killed).Round(time.Millisecond), a.done.Sub(killed).Round(time.Millisecond))
	if d := ran.Sub(killed); d > 5*time.Second {
		t.Errorf("the run after the kill ended %v after it, want within 5s of a 500 ms lease", d)
	}
	if rs := storedResults(t, redistest.At(srv.Addr), prefix); len(rs) != 1 || rs[0].Key != k {
		t.Errorf("stored results: %+v, want the one of %v", rs, k)
	}
}

// idemKey returns the lock key of idempotency key ik on POST route, of
// no caller.
func idemKey(t *testing.T, route, ik string) lockcore.Key {
	t.Helper()
	k, err := idem.LockKey([]string{http.MethodPost, route}, "", ik)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// storedResults lists the results stored under prefix on b.
func storedResults(t *testing.T, b *redistest.Backend, prefix string) []lockcore.StoredResult {
	t.Helper()
	e, err := redisengine.New(b.Universal(t), redisengine.Options{Prefix: prefix, OperatorOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	rs, _, err := e.StoredResults(context.Background(), "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}
