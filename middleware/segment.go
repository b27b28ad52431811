package middleware

import (
	"net/http"

	"github.com/routelock/lock/internal/lifecycle"
	"github.com/routelock/lock/lockcore"
)

// serveSegment serves r under the lock of one open segment of key's
// resource (lifecycle.AcquireSegment), released when the handler returns
// (or panics). The handler runs once: when it finds its segment exhausted,
// lock.NextSegment moves the request to another open segment in place, or
// returns the error to answer with (Error answers 410 Gone when no segment
// is open). A request that already holds a segment of the resource (a
// nested lock on it) re-enters it.
func (m *locker) serveSegment(w http.ResponseWriter, r *http.Request, next http.Handler, key lockcore.Key, p lifecycle.Policy) {
	lease, err := lifecycle.AcquireSegment(r.Context(), m.l, key, p)
	if err != nil {
		m.onError(w, r, err)
		return
	}
	defer lease.Release(r.Context())
	next.ServeHTTP(w, r.WithContext(lease.Context()))
}
