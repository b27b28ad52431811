package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/routelock/lock/internal/operate"
	"github.com/routelock/lock/lockcore"
)

// Limits of the requests the handler accepts.
const (
	// defaultLimit is how many locks a list shows when the request gives
	// no limit and Config.PageSize is 0.
	defaultLimit = 100
	// maxLimit is the most locks one list request may ask for.
	maxLimit = 1000
	// maxBody bounds the body of a release request.
	maxBody = 64 << 10
	// maxPrefixLen bounds the prefix of a list request.
	maxPrefixLen = 4096
)

// Config configures Handler. The zero Config is the default: a page titled
// "Locks", no logging, lists of 100 locks, and browser posts accepted from
// the handler's own origin only.
type Config struct {
	// Title is the heading and title of the HTML page. Empty: "Locks".
	Title string

	// Logger, when set, makes the handler log every force-release (the
	// resource name, such as productID, never the key's values; the
	// revoked owner's digest, fences, reason, remote address) at level
	// Info, and every error of the Operator at level Error. The whole key
	// is in the lock's audit record (Inspect). Nil: silent.
	Logger *slog.Logger

	// PageSize is how many locks a list shows when the request gives no
	// limit: 1 to 1000, the most a request may ask for. 0: 100.
	PageSize int

	// TrustedOrigins lets browser form posts from these origins (such as
	// "https://ops.example.com") force-release locks, beside those from
	// the handler's own origin: for a page served behind a proxy that
	// rewrites the Host header. Each is scheme://host[:port]; see
	// http.CrossOriginProtection.AddTrustedOrigin.
	TrustedOrigins []string
}

// config is a Config with its defaults filled in, and the clock of the
// page.
type config struct {
	now     func() time.Time
	title   string
	logger  *slog.Logger
	limit   int
	origins []string
}

// Handler returns an http.Handler that shows the locks of op and
// force-releases them: see the package documentation for its routes and
// its JSON. It serves those routes relative to where it is mounted (chi's
// Mount, http.StripPrefix, an http.ServeMux pattern ending in '/'), and
// answers 404 to every other path. It reads c once: changing c's
// TrustedOrigins afterwards changes nothing.
//
// Panics if op is nil or c is invalid (a PageSize out of range, an origin
// that is not scheme://host[:port]).
func Handler(op lockcore.Operator, c Config) http.Handler {
	return newHandler(op, c, time.Now)
}

func newHandler(op lockcore.Operator, c Config, now func() time.Time) http.Handler {
	if op == nil {
		panic("routelock: admin.Handler(nil)")
	}
	cfg := config{now: now, title: c.Title, logger: c.Logger, limit: c.PageSize, origins: slices.Clone(c.TrustedOrigins)}
	if cfg.title == "" {
		cfg.title = "Locks"
	}
	if cfg.limit == 0 {
		cfg.limit = defaultLimit
	}
	if cfg.limit < 1 || cfg.limit > maxLimit {
		panic(fmt.Sprintf("routelock: admin.PageSize(%d) is out of range 1..%d", cfg.limit, maxLimit))
	}
	cop := http.NewCrossOriginProtection()
	for _, o := range cfg.origins {
		if err := cop.AddTrustedOrigin(o); err != nil {
			panic("routelock: admin.TrustedOrigin: " + err.Error())
		}
	}
	return &handler{op: op, cfg: cfg, cop: cop}
}

type handler struct {
	op  lockcore.Operator
	cfg config
	cop *http.CrossOriginProtection
}

// What a request's path asks for.
type routeKind int

const (
	routeIndex    routeKind = iota // .../
	routeNotFound                  // a path the handler does not serve
	routeList                      // .../locks
	routeLock                      // .../locks/{key}
	routeRelease                   // .../locks/{key}/release
	routeGates                     // .../gates
	routeOpen                      // .../gates/{key}/open
	routeResults                   // .../results
	routeDrop                      // .../results/{key}/drop
)

// route is a request's path, read from its end.
type route struct {
	kind routeKind
	key  string // the key's path segment, still escaped
	tail int    // path segments after the mount point's final '/'
}

// parseRoute reads the handler's own part of an escaped path (ownPath),
// with or without its leading '/': "" and "/" are the index, a documented
// route is that route, and anything else is not found.
func parseRoute(p string) route {
	p = strings.TrimPrefix(p, "/")
	if p == "" {
		return route{kind: routeIndex, tail: 1}
	}
	s := strings.Split(p, "/")
	n := len(s)
	switch {
	case n == 3 && s[0] == "locks" && s[2] == "release" && isKeySegment(s[1]):
		return route{kind: routeRelease, key: s[1], tail: 3}
	case n == 3 && s[0] == "gates" && s[2] == "open" && isKeySegment(s[1]):
		return route{kind: routeOpen, key: s[1], tail: 3}
	case n == 3 && s[0] == "results" && s[2] == "drop" && isKeySegment(s[1]):
		return route{kind: routeDrop, key: s[1], tail: 3}
	case n == 2 && s[0] == "locks" && isKeySegment(s[1]):
		return route{kind: routeLock, key: s[1], tail: 2}
	case n == 1 && s[0] == "locks":
		return route{kind: routeList, tail: 1}
	case n == 1 && s[0] == "gates":
		return route{kind: routeGates, tail: 1}
	case n == 1 && s[0] == "results":
		return route{kind: routeResults, tail: 1}
	}
	return route{kind: routeNotFound, tail: n}
}

// ownPath returns the handler's own part of r's escaped path: what follows
// the mount point. The innermost router that matched r set r.Pattern:
//   - chi (its route context's pattern is r.Pattern): a pattern ending in
//     '*' (Mount, Handle("/admin/*"), under Route or CleanPath too) leaves
//     the handler the path's last segments that its "*" value has (a key's
//     segment has no '/': keySegment escapes it); any other pattern is the
//     mount point itself, with or without its '/';
//   - an http.ServeMux pattern ending in '/' that the path still starts
//     with leaves what follows it, unless a handler between the mux and
//     this one (http.StripPrefix) rewrote the path after the match.
//
// Otherwise the path is the handler's own already (http.StripPrefix, or
// the handler at the root).
func ownPath(r *http.Request) string {
	p := r.URL.EscapedPath()
	if rctx := chi.RouteContext(r.Context()); rctx != nil && r.Pattern != "" && rctx.RoutePattern() == r.Pattern {
		switch {
		case strings.HasSuffix(r.Pattern, "/"):
			return "/"
		case !strings.HasSuffix(r.Pattern, "*"):
			return ""
		}
		// The request's value, not the route context's: chi's Mount
		// empties the latter before calling the mounted handler.
		n := strings.Count("/"+r.PathValue("*"), "/")
		if s := strings.Split(p, "/"); n < len(s) {
			return "/" + strings.Join(s[len(s)-n:], "/")
		}
		return p
	}
	if pat := patternPath(r.Pattern); strings.HasSuffix(pat, "/") && strings.HasPrefix(p, pat) && !rewritten(r) {
		return p[len(pat)-1:]
	}
	return p
}

// rewritten says whether r's path is no longer the one it arrived with
// (http.StripPrefix took a prefix off).
func rewritten(r *http.Request) bool {
	if r.RequestURI == "" {
		return false
	}
	u, err := url.ParseRequestURI(r.RequestURI)
	return err == nil && u.Path != r.URL.Path
}

// patternPath returns the path of an http.ServeMux pattern, without its
// method and host.
func patternPath(pat string) string {
	if _, rest, ok := strings.Cut(pat, " "); ok {
		pat = strings.TrimLeft(rest, " \t")
	}
	if i := strings.IndexByte(pat, '/'); i > 0 {
		pat = pat[i:]
	}
	return pat
}

func isKeySegment(s string) bool {
	switch s {
	case "", "locks", "release", "gates", "open", "results", "drop":
		return false
	}
	return true
}

// keySegment returns key (escaped, as Key.String prints it) as a segment of
// a URL path: url.PathEscape, and the first byte as %XX when the segment
// would read as one of the handler's own words or as a dot segment.
func keySegment(key string) string {
	s := url.PathEscape(key)
	switch s {
	case "locks", "release", "gates", "open", "results", "drop", ".", "..":
		return fmt.Sprintf("%%%02X", s[0]) + s[1:]
	}
	return s
}

// fullPath returns the escaped path the client asked for, before any
// router or http.StripPrefix took a part of it; r.URL's when the request
// did not come from a server.
func fullPath(r *http.Request) string {
	if r.RequestURI != "" && r.RequestURI != "*" {
		if u, err := url.ParseRequestURI(r.RequestURI); err == nil && u.Path != "" {
			return u.EscapedPath()
		}
	}
	return r.URL.EscapedPath()
}

// root returns the URL of the handler's index relative to the page that
// answers the route, ending in '/': relative, so that the page's links
// work wherever the handler is mounted, behind a proxy that strips a
// prefix too. A key's segment has no '/' (keySegment escapes it), so the
// route's segments are the browser's directories.
func (rt route) root() string {
	if rt.tail <= 1 {
		return "./"
	}
	return strings.Repeat("../", rt.tail-1)
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt := parseRoute(ownPath(r))
	if rt.kind == routeNotFound {
		h.fail(w, r, rt, http.StatusNotFound, "not found")
		return
	}
	if rt.kind == routeRelease || rt.kind == routeOpen || rt.kind == routeDrop {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			h.fail(w, r, rt, http.StatusMethodNotAllowed, "use POST to release a lock, open a gate or drop a result")
			return
		}
		switch rt.kind {
		case routeOpen:
			h.open(w, r, rt)
		case routeDrop:
			h.drop(w, r, rt)
		default:
			h.release(w, r, rt)
		}
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		h.fail(w, r, rt, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	switch rt.kind {
	case routeIndex:
		if !strings.HasSuffix(fullPath(r), "/") { // http.StripPrefix("/admin") of /admin
			h.redirect(w, r)
			return
		}
		h.list(w, r, rt, true)
	case routeList:
		h.list(w, r, rt, wantsHTML(r))
	case routeLock:
		h.lock(w, r, rt)
	case routeGates:
		h.gates(w, r, rt, wantsHTML(r))
	case routeResults:
		h.results(w, r, rt, wantsHTML(r))
	default:
		h.redirect(w, r)
	}
}

// redirect sends a path that names the handler's index without its final
// '/' to the one with it, as http.ServeMux does for a subtree, so that the
// page's links resolve.
func (h *handler) redirect(w http.ResponseWriter, r *http.Request) {
	p := fullPath(r)
	loc := "./" + p[strings.LastIndexByte(p, '/')+1:] + "/"
	if r.URL.RawQuery != "" {
		loc += "?" + r.URL.RawQuery
	}
	// Not http.Redirect: it resolves a relative location against r.URL,
	// which http.StripPrefix has cut.
	w.Header().Set("Location", loc)
	w.WriteHeader(http.StatusMovedPermanently)
}

// filter reads the prefix and the limit of a list request (of locks or of
// stored results), answering 400 when they are out of bounds.
func (h *handler) filter(w http.ResponseWriter, r *http.Request, rt route, html bool) (prefix string, limit int, ok bool) {
	q := r.URL.Query()
	prefix = q.Get("prefix")
	if len(prefix) > maxPrefixLen {
		h.failHTML(w, r, rt, html, http.StatusBadRequest, fmt.Sprintf("prefix longer than %d bytes", maxPrefixLen))
		return "", 0, false
	}
	limit = h.cfg.limit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxLimit {
			h.failHTML(w, r, rt, html, http.StatusBadRequest, fmt.Sprintf("limit must be a number from 1 to %d", maxLimit))
			return "", 0, false
		}
		limit = n
	}
	return prefix, limit, true
}

func (h *handler) list(w http.ResponseWriter, r *http.Request, rt route, html bool) {
	prefix, limit, ok := h.filter(w, r, rt, html)
	if !ok {
		return
	}
	infos, more, err := h.op.List(r.Context(), prefix, limit)
	if err != nil {
		h.opFailed(w, r, rt, html, "list", err)
		return
	}
	l := operate.List{Locks: make([]operate.Lock, len(infos)), More: more, RestartGuardMillis: h.guardMillis(r)}
	for i, in := range infos {
		l.Locks[i] = operate.FromInfo(in)
	}
	if html {
		p := &page{Root: rt.root(), Prefix: prefix, Limit: limit, Locks: l.Locks, More: more, GuardMillis: l.RestartGuardMillis}
		h.fillGates(r, p)
		h.page(w, r, http.StatusOK, p)
		return
	}
	writeJSON(w, http.StatusOK, l)
}

func (h *handler) lock(w http.ResponseWriter, r *http.Request, rt route) {
	html := wantsHTML(r)
	key, err := pathKey(rt.key)
	if err != nil {
		h.failHTML(w, r, rt, html, http.StatusBadRequest, err.Error())
		return
	}
	in, err := h.op.Inspect(r.Context(), key)
	if err != nil {
		h.opFailed(w, r, rt, html, "inspect", err)
		return
	}
	if in.Key == "" {
		in.Key = key.String()
	}
	l := operate.FromInfo(in)
	l.RestartGuardMillis = h.guardMillis(r)
	if html {
		h.page(w, r, http.StatusOK, &page{Root: rt.root(), Single: true, Locks: []operate.Lock{l}, GuardMillis: l.RestartGuardMillis})
		return
	}
	writeJSON(w, http.StatusOK, l)
}

func (h *handler) release(w http.ResponseWriter, r *http.Request, rt route) {
	key, html, ok := h.post(w, r, rt)
	if !ok {
		return
	}
	reason, code, err := readReason(w, r)
	if err != nil {
		h.failHTML(w, r, rt, html, code, err.Error())
		return
	}
	rev, err := h.op.Revoke(r.Context(), key, reason)
	if err != nil {
		h.opFailed(w, r, rt, html, "revoke", err)
		return
	}
	if rev.Key == "" {
		rev.Key = key.String()
	}
	if l := h.cfg.logger; l != nil {
		l.LogAttrs(r.Context(), slog.LevelInfo, "admin: lock force-released",
			slog.String("resource", key.Name()), slog.String("owner", rev.Owner),
			slog.Int64("fence", rev.Fence), slog.Int64("new_fence", rev.NewFence),
			slog.String("reason", rev.Reason), slog.String("remote", r.RemoteAddr))
	}
	out := operate.FromRevocation(rev)
	if html {
		p := &page{Root: rt.root(), Single: true, Released: &out}
		if in, err := h.op.Inspect(r.Context(), key); err == nil {
			if in.Key == "" {
				in.Key = key.String()
			}
			p.Locks = []operate.Lock{operate.FromInfo(in)}
		}
		h.page(w, r, http.StatusOK, p)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// post is the start of a POST on a key's route: it refuses a cross-origin
// one and a bad key, answering them, and otherwise returns the key and
// whether the answer is a page (a form posted from one).
func (h *handler) post(w http.ResponseWriter, r *http.Request, rt route) (lockcore.Key, bool, bool) {
	html := isForm(r) && wantsHTML(r)
	if err := h.cop.Check(r); err != nil {
		h.failHTML(w, r, rt, html, http.StatusForbidden, "cross-origin request refused")
		return lockcore.Key{}, html, false
	}
	key, err := pathKey(rt.key)
	if err != nil {
		h.failHTML(w, r, rt, html, http.StatusBadRequest, err.Error())
		return lockcore.Key{}, html, false
	}
	return key, html, true
}

// gatekeeper returns the handler's Operator as a lockcore.Gatekeeper, when
// it is one.
func (h *handler) gatekeeper() (lockcore.Gatekeeper, bool) {
	g, ok := h.op.(lockcore.Gatekeeper)
	return g, ok
}

// guardMillis returns how long the restart guard of the handler's
// Operator still refuses fresh locks, in milliseconds
// (operate.RestartGuard): 0 when it does not, when the Operator keeps no
// guard (is no lockcore.RestartGuarder), and when it cannot say, as the
// answer it goes with then says or will.
func (h *handler) guardMillis(r *http.Request) int64 {
	left, err := operate.RestartGuard(r.Context(), h.op)
	if err != nil {
		return 0
	}
	return left.Milliseconds()
}

// gates answers the closed gates: JSON, or the index page.
func (h *handler) gates(w http.ResponseWriter, r *http.Request, rt route, html bool) {
	if html {
		h.list(w, r, rt, true)
		return
	}
	g, ok := h.gatekeeper()
	if !ok {
		h.fail(w, r, rt, http.StatusNotImplemented, "the lock engine has no gates")
		return
	}
	gs, err := g.Gates(r.Context())
	if err != nil {
		h.opFailed(w, r, rt, false, "gates", err)
		return
	}
	writeJSON(w, http.StatusOK, operate.FromGates(gs))
}

// open opens the gate of the route's key: a sold-out resource is sold
// again, on every instance.
func (h *handler) open(w http.ResponseWriter, r *http.Request, rt route) {
	key, html, ok := h.post(w, r, rt)
	if !ok {
		return
	}
	g, ok := h.gatekeeper()
	if !ok {
		h.failHTML(w, r, rt, html, http.StatusNotImplemented, "the lock engine has no gates")
		return
	}
	if err := g.OpenGate(r.Context(), key); err != nil {
		h.opFailed(w, r, rt, html, "open gate", err)
		return
	}
	if l := h.cfg.logger; l != nil {
		l.LogAttrs(r.Context(), slog.LevelInfo, "admin: gate opened",
			slog.String("resource", key.Name()), slog.String("remote", r.RemoteAddr))
	}
	if html {
		p := &page{Root: rt.root(), Opened: key.String()}
		h.fillGates(r, p)
		h.page(w, r, http.StatusOK, p)
		return
	}
	writeJSON(w, http.StatusOK, operate.Opened{Opened: key.String()})
}

// errNoResults answers a request for stored results to a handler whose
// engine keeps none.
const errNoResults = "the lock engine keeps no results"

// results answers the stored results whose keys start with the request's
// prefix: JSON, or the page of stored results.
func (h *handler) results(w http.ResponseWriter, r *http.Request, rt route, html bool) {
	rs, ok := operate.ResultsOf(h.op)
	if !ok {
		h.failHTML(w, r, rt, html, http.StatusNotImplemented, errNoResults)
		return
	}
	prefix, limit, ok := h.filter(w, r, rt, html)
	if !ok {
		return
	}
	stored, more, err := rs.StoredResults(r.Context(), prefix, limit)
	if err != nil {
		h.opFailed(w, r, rt, html, "stored results", err)
		return
	}
	out := operate.FromStoredResults(stored, more)
	if html {
		h.page(w, r, http.StatusOK, &page{Root: rt.root(), ResultsPage: true, Prefix: prefix, Limit: limit, Results: out.Results, More: more})
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// drop drops the stored result of the route's key: the next request with
// its idempotency key runs as if it were the first.
func (h *handler) drop(w http.ResponseWriter, r *http.Request, rt route) {
	key, html, ok := h.post(w, r, rt)
	if !ok {
		return
	}
	rs, ok := operate.ResultsOf(h.op)
	if !ok {
		h.failHTML(w, r, rt, html, http.StatusNotImplemented, errNoResults)
		return
	}
	found, err := rs.DropResult(r.Context(), key)
	if err != nil {
		h.opFailed(w, r, rt, html, "drop result", err)
		return
	}
	if !found {
		h.failHTML(w, r, rt, html, http.StatusNotFound, "no result stored")
		return
	}
	if l := h.cfg.logger; l != nil {
		l.LogAttrs(r.Context(), slog.LevelInfo, "admin: stored result dropped",
			slog.String("resource", key.Name()), slog.String("remote", r.RemoteAddr))
	}
	if html {
		p := &page{Root: rt.root(), ResultsPage: true, Dropped: key.String()}
		if stored, more, err := rs.StoredResults(r.Context(), "", h.cfg.limit); err == nil {
			p.Results, p.More = operate.FromStoredResults(stored, more).Results, more
		}
		h.page(w, r, http.StatusOK, p)
		return
	}
	writeJSON(w, http.StatusOK, operate.Dropped{Dropped: key.String()})
}

// pathKey parses the key of a request's path: its segment, path-escaped,
// of the key as lockcore.Key.String prints it.
func pathKey(seg string) (lockcore.Key, error) {
	s, err := url.PathUnescape(seg)
	if err != nil {
		return lockcore.Key{}, fmt.Errorf("%w: bad escape in path", lockcore.ErrInvalidKey)
	}
	return lockcore.ParseKey(s)
}

// isForm reports whether r's body is an HTML form.
func isForm(r *http.Request) bool {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return mt == "application/x-www-form-urlencoded" || mt == "multipart/form-data"
}

// wantsHTML reports whether the client asked for HTML, as browsers do.
func wantsHTML(r *http.Request) bool {
	a := r.Header.Get("Accept")
	return strings.Contains(a, "text/html") && !strings.Contains(a, "application/json")
}

// errReason is a reason the handler refuses.
var errReason = errors.New("a reason is required")

// readReason returns the reason of a release request, from its JSON body
// ({"reason": "..."}) or its form field reason, with the status to answer
// when there is none or it is unacceptable.
func readReason(w http.ResponseWriter, r *http.Request) (string, int, error) {
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	var reason string
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	switch {
	case ct == "":
		return "", http.StatusBadRequest, fmt.Errorf("%w: send it as JSON {\"reason\": \"...\"} or as the form field reason", errReason)
	case err != nil:
		return "", http.StatusUnsupportedMediaType, errors.New("unreadable Content-Type")
	case mt == "application/json":
		var body struct {
			Reason *string `json:"reason"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			var mb *http.MaxBytesError
			if errors.As(err, &mb) {
				return "", http.StatusRequestEntityTooLarge, errors.New("body too large")
			}
			return "", http.StatusBadRequest, errors.New("body is not a JSON object with a string reason")
		}
		if body.Reason != nil {
			reason = *body.Reason
		}
	case mt == "application/x-www-form-urlencoded" || mt == "multipart/form-data":
		if err := r.ParseMultipartForm(maxBody); err != nil && !errors.Is(err, http.ErrNotMultipart) {
			var mb *http.MaxBytesError
			if errors.As(err, &mb) {
				return "", http.StatusRequestEntityTooLarge, errors.New("body too large")
			}
			return "", http.StatusBadRequest, errors.New("unreadable form")
		}
		reason = r.PostFormValue("reason")
	default:
		return "", http.StatusUnsupportedMediaType, errors.New("send application/json or a form")
	}
	reason = strings.TrimSpace(reason)
	if reason == "" {
		return "", http.StatusBadRequest, errReason
	}
	if err := operate.CheckReason(reason); err != nil {
		return "", http.StatusBadRequest, err
	}
	return reason, 0, nil
}

// opStatus maps an Operator's error to a status and a message that carries
// nothing of the backend's own error.
func opStatus(err error) (int, string) {
	switch {
	case errors.Is(err, lockcore.ErrNotHeld):
		return http.StatusNotFound, "lock not held"
	case errors.Is(err, lockcore.ErrInvalidKey):
		return http.StatusBadRequest, "invalid key"
	case errors.Is(err, lockcore.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, "lock service unavailable"
	case errors.Is(err, lockcore.ErrMisconfigured):
		return http.StatusInternalServerError, "lock service misconfigured"
	case errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable, "request cancelled"
	}
	return http.StatusInternalServerError, "internal error"
}

func (h *handler) opFailed(w http.ResponseWriter, r *http.Request, rt route, html bool, op string, err error) {
	code, msg := opStatus(err)
	if l := h.cfg.logger; l != nil && code >= 500 && !errors.Is(err, context.Canceled) {
		l.LogAttrs(r.Context(), slog.LevelError, "routelock: admin "+op+" failed", slog.String("error", err.Error()))
	}
	h.failHTML(w, r, rt, html, code, msg)
}

// fail answers an error in HTML to a browser, else in JSON.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, rt route, code int, msg string) {
	h.failHTML(w, r, rt, wantsHTML(r) && (r.Method == http.MethodGet || isForm(r)), code, msg)
}

func (h *handler) failHTML(w http.ResponseWriter, r *http.Request, rt route, html bool, code int, msg string) {
	if html {
		h.page(w, r, code, &page{Root: rt.root(), Status: code, Error: msg})
		return
	}
	writeJSON(w, code, operate.Error{Error: msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil { // operate's types always marshal
		code, b = http.StatusInternalServerError, []byte(`{"error": "internal error"}`)
	}
	hd := w.Header()
	hd.Set("Content-Type", "application/json; charset=utf-8")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}
