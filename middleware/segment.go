package middleware

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/lockcore"
)

// maxReplay is the most of a request's body that the middleware keeps, so
// that a handler run again under another segment reads it again.
const maxReplay = 1 << 20

// errNoReplay refuses a move whose handler read more of the body than the
// middleware keeps: the request cannot be served again, and is answered
// 503, to be retried.
var errNoReplay = fmt.Errorf("%w: the request's segment is exhausted, and its body (over %d bytes read) cannot be read again under another: retry", lockcore.ErrUnavailable, maxReplay)

// serveSegment serves r under the lock of one open segment of key's
// resource (lifecycle.AcquireSegment). When the handler asks to move on
// (lock.NextSegment) and wrote nothing, it serves r again under
// another, with the body, headers and router state the first run began
// with, until no segment is open: then the answer is that of a closed
// gate. A request that already holds a segment of the resource (a nested
// lock on it) re-enters it and is not served again here: the outer lock
// moves it.
func (m *locker) serveSegment(w http.ResponseWriter, r *http.Request, next http.Handler, key lockcore.Key, p lifecycle.Policy) {
	var deadline time.Time // the wait of all the runs together
	switch {
	case p.Wait > 0:
		deadline = time.Now().Add(p.Wait)
	case p.Wait == 0:
		deadline = time.Now().Add(5 * time.Second) // a Policy's default wait
	}
	var (
		body   *replayBody
		route  *routeState
		header http.Header
		first  *http.Request // the request as the first run began with it
	)
	// Each move closes a segment's gate, so that after p.Segments moves
	// none is open; one more acquisition finds that out.
	for run := range p.Segments + 1 {
		q := p
		if run > 0 {
			clear(w.Header())
			maps.Copy(w.Header(), header)
			if body != nil && !body.rewind() {
				m.onError(w, r, errNoReplay)
				return
			}
			route.restore()
			r = first.Clone(first.Context()) // its Body the replayBody, if any
			if !deadline.IsZero() {
				if q.Wait = time.Until(deadline); q.Wait <= 0 {
					q.Wait = lockcore.FailFast // the wait is spent: one attempt
				}
			}
		}
		lease, err := lifecycle.AcquireSegment(r.Context(), m.l, key, q)
		if err != nil {
			m.onError(w, r, err)
			return
		}
		if run == 0 {
			// What a run after this one begins with, as this one does.
			if r.Body != nil && r.Body != http.NoBody {
				body = &replayBody{rc: r.Body}
				r = r.WithContext(r.Context())
				r.Body = body
			}
			first = r.Clone(r.Context()) // its header, URL and form, which the run may change
			route = saveRoute(r)
			header = w.Header().Clone()
		}
		tw := &writeTracker{ResponseWriter: w}
		if !m.serveHeld(tw, r, next, lease) || tw.wrote || lease.ReenteredInMemory() {
			return
		}
	}
	clear(w.Header())
	maps.Copy(w.Header(), header)
	m.onError(w, r, lifecycle.GateError(key))
}

// serveHeld runs next under lease, released when it returns (or panics),
// and reports whether the handler asked to move on to another segment.
func (m *locker) serveHeld(w http.ResponseWriter, r *http.Request, next http.Handler, lease *lifecycle.Lease) bool {
	defer lease.Release(r.Context())
	next.ServeHTTP(w, r.WithContext(lease.Context()))
	return lease.Moving()
}

// routeState is chi's routing state of a request as it was before a run
// of the handler, which routing further down changes (a mounted router
// cuts RoutePath, patterns and parameters are appended, a sub-router
// reuses the parameter slices in place): put back before the next run, so
// that it routes the request as the first did. chi.Context.Clone copies
// every slice of it.
type routeState struct {
	rctx, saved *chi.Context
}

func saveRoute(r *http.Request) *routeState {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil {
		return nil
	}
	return &routeState{rctx: rctx, saved: rctx.Clone()}
}

func (s *routeState) restore() {
	if s != nil {
		*s.rctx = *s.saved.Clone()
	}
}

// writeTracker is a ResponseWriter that records whether the handler wrote
// anything: a response begun cannot be served again under another segment.
type writeTracker struct {
	http.ResponseWriter
	wrote bool
}

func (t *writeTracker) WriteHeader(code int) {
	t.wrote = true
	t.ResponseWriter.WriteHeader(code)
}

func (t *writeTracker) Write(b []byte) (int, error) {
	t.wrote = true
	return t.ResponseWriter.Write(b)
}

// Flush flushes the response, as http.Flusher, when the writer
// underneath can.
func (t *writeTracker) Flush() {
	t.wrote = true
	_ = http.NewResponseController(t.ResponseWriter).Flush()
}

// Unwrap returns the ResponseWriter underneath, for http.ResponseController
// (Hijack, SetReadDeadline and the rest).
func (t *writeTracker) Unwrap() http.ResponseWriter { return t.ResponseWriter }

// replayBody is a request body that a handler run again reads again from
// the start: what the runs before read is kept in memory, up to maxReplay.
type replayBody struct {
	rc   io.ReadCloser
	buf  []byte
	pos  int
	err  error // the underlying body's error once it returned one (io.EOF)
	over bool  // more than maxReplay was read: it cannot be read again
}

func (b *replayBody) Read(p []byte) (int, error) {
	if b.pos < len(b.buf) {
		n := copy(p, b.buf[b.pos:])
		b.pos += n
		return n, nil
	}
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.rc.Read(p)
	if !b.over {
		if len(b.buf)+n > maxReplay {
			b.over, b.buf = true, nil
		} else {
			b.buf = append(b.buf, p[:n]...)
		}
	}
	b.pos = len(b.buf)
	b.err = err
	return n, err
}

// Close does nothing: the server closes the body underneath, and a run
// after this one reads it again.
func (b *replayBody) Close() error { return nil }

// rewind makes the next Read start from the beginning, and reports
// whether it can.
func (b *replayBody) rewind() bool {
	b.pos = 0
	return !b.over
}
