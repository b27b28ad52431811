package redisengine

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/routelock/lock/internal/redistest"
)

// logBuffer is a goroutine-safe log sink.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// logRecords is a slog.Handler that keeps the records it is given, in
// order.
type logRecords struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecords) WithGroup(string) slog.Handler            { return r }

func (r *logRecords) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}

// count returns how many records' messages contain s.
func (r *logRecords) count(s string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.recs {
		if strings.Contains(rec.Message, s) {
			n++
		}
	}
	return n
}

// first returns the position of the first record whose message contains
// s, and its level; -1 when there is none.
func (r *logRecords) first(s string) (int, slog.Level) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, rec := range r.recs {
		if strings.Contains(rec.Message, s) {
			return i, rec.Level
		}
	}
	return -1, 0
}

func (r *logRecords) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, rec := range r.recs {
		b.WriteString(rec.Level.String() + " " + rec.Message)
		rec.Attrs(func(a slog.Attr) bool {
			b.WriteString(" " + a.String())
			return true
		})
		b.WriteByte('\n')
	}
	return b.String()
}

const (
	logDown = "Redis unreachable"
	logUp   = "Redis answers again"
)

// TestRestartLoggedWithoutTraffic: an Engine that holds nothing and takes
// nothing notices that Redis restarted, through its subscription, and
// logs the outage and the return, once each, within a bounded time.
func TestRestartLoggedWithoutTraffic(t *testing.T) {
	t.Parallel() // it waits on a restart; its servers are its own
	restarts := map[string]func(t *testing.T) (addr string, restart func() error){
		"miniredis": func(t *testing.T) (string, func() error) {
			b := redistest.Mini(t)
			return b.Addr, func() error {
				b.Mini.Close()
				return b.Mini.Restart()
			}
		},
	}
	if srv := redistest.OwnReal(t); srv != nil {
		restarts["redis"] = func(*testing.T) (string, func() error) { return srv.Addr, srv.Restart }
	}
	for name, start := range restarts {
		t.Run(name, func(t *testing.T) {
			addr, restart := start(t)
			logged := new(logRecords)
			l := lockerOn(t, defaultKind.client(t, addr), redistest.Prefix(t), Options{Logger: slog.New(logged)})
			if err := l.Check(context.Background()); err != nil {
				t.Fatal(err)
			}
			if logged.count(logDown)+logged.count(logUp) != 0 {
				t.Fatalf("an outage logged before the restart:\n%s", logged)
			}
			if err := restart(); err != nil {
				t.Fatal(err)
			}
			eventually(t, 10*time.Second, "the restart logged", func() bool {
				return logged.count(logDown) > 0 && logged.count(logUp) > 0
			})
			down, downLevel := logged.first(logDown)
			up, upLevel := logged.first(logUp)
			if down > up || downLevel != slog.LevelWarn || upLevel != slog.LevelInfo {
				t.Errorf("want a warning that Redis is unreachable, then the info that it answers again:\n%s", logged)
			}
			for what, want := range map[string]int{logDown: 1, logUp: 1} {
				if n := logged.count(what); n != want {
					t.Errorf("%q logged %d times, want %d:\n%s", what, n, want, logged)
				}
			}
		})
	}
}
