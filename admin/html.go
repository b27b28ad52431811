package admin

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/routelock/lock/internal/humantime"
	"github.com/routelock/lock/internal/operate"
)

// page is what the HTML template shows: a list of locks, one lock, a
// force-release done, the stored results, a drop done, or an error.
type page struct {
	Title    string
	Root     string // URL of the index relative to the page, ending in '/'
	Prefix   string
	Limit    int
	Locks    []operate.Lock
	More     bool
	Single   bool                // a page of one key
	Released *operate.Revocation // the force-release this page answers
	Gates    []operate.Gate      // the closed gates, on the index
	Opened   string              // the key whose gate this page answers the opening of
	// ResultsPage makes it the page of stored results (Results), which
	// Prefix and Limit filter, instead of locks.
	ResultsPage  bool
	Results      []operate.Result
	KeepsResults bool   // the engine keeps results: the page links them
	Dropped      string // the key whose stored result this page answers the drop of
	// GuardMillis is how long the restart guard still refuses fresh
	// locks, in ms: 0 when it does not.
	GuardMillis int64
	Status      int
	Error       string
	Now         time.Time
}

// fillGates sets p's closed gates, when the handler's Operator has gates
// and answers; a page without them is still a page.
func (h *handler) fillGates(r *http.Request, p *page) {
	if g, ok := h.gatekeeper(); ok {
		if gs, err := g.Gates(r.Context()); err == nil {
			p.Gates = operate.FromGates(gs).Gates
		}
	}
}

// Path returns key as a segment of a URL path.
func (p *page) Path(key string) string { return keySegment(key) }

// Instance names the i-th instance of a holder, whose engine id is id:
// its instance name (names[i]), or the id when the name is not known.
func (p *page) Instance(names []string, i int, id string) string {
	if i < len(names) && names[i] != "" {
		return names[i]
	}
	return id
}

// Self returns the URL of the page's own view, for its refresh link.
func (p *page) Self() string {
	if p.Single && len(p.Locks) == 1 {
		return p.Root + "locks/" + keySegment(p.Locks[0].Key)
	}
	base := p.Root
	if p.ResultsPage {
		base += "results"
	}
	q := url.Values{}
	if p.Prefix != "" {
		q.Set("prefix", p.Prefix)
	}
	if p.Limit != 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if len(q) == 0 {
		return base
	}
	return base + "?" + q.Encode()
}

// Ago says how long ago t was, by the server's clock.
func (p *page) Ago(t time.Time) string {
	if t.IsZero() {
		return "at an unknown time"
	}
	d := p.Now.Sub(t)
	if d < time.Millisecond {
		return "just now"
	}
	return humantime.Duration(d) + " ago"
}

// For says how long it has been since t.
func (p *page) For(t time.Time) string {
	if t.IsZero() {
		return "for an unknown time"
	}
	return humantime.Duration(max(p.Now.Sub(t), 0))
}

// Left says how long is left until t.
func (p *page) Left(t time.Time) string {
	if t.IsZero() {
		return "no deadline"
	}
	d := t.Sub(p.Now)
	if d < time.Millisecond {
		return "deadline passed"
	}
	return humantime.Duration(d) + " left"
}

// Millis formats a duration in milliseconds.
func (p *page) Millis(ms int64) string {
	return humantime.Duration(time.Duration(ms) * time.Millisecond)
}

// Stamp formats t for a tooltip.
func (p *page) Stamp(t time.Time) string {
	if t.IsZero() {
		return "unknown"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000 UTC")
}

// Summary counts the locks shown, those held and their waiters.
func (p *page) Summary() string {
	held, waiting := 0, 0
	for _, l := range p.Locks {
		if l.Held {
			held++
		}
		waiting += len(l.Waiters)
	}
	return fmt.Sprintf("%s, %d held, %s", plural(len(p.Locks), "lock"), held, plural(waiting, "waiter"))
}

// ResultCount counts the stored results shown.
func (p *page) ResultCount() string { return plural(len(p.Results), "stored result") }

// Bytes formats a size in bytes.
func (p *page) Bytes(n int64) string { return plural(int(n), "byte") }

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// StatusText names the page's status.
func (p *page) StatusText() string { return http.StatusText(p.Status) }

// csp allows the page its inline style and nothing else: no script, no
// frame around it (a framed release button could be clicked for the
// user), no form posting elsewhere.
const csp = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func (h *handler) page(w http.ResponseWriter, r *http.Request, code int, p *page) {
	p.Title, p.Now = h.cfg.title, h.cfg.now()
	_, p.KeepsResults = operate.ResultsOf(h.op)
	if p.Limit == 0 && !p.Single {
		p.Limit = h.cfg.limit
	}
	var b bytes.Buffer
	if err := pageTmpl.Execute(&b, p); err != nil {
		code = http.StatusInternalServerError
		b.Reset()
		b.WriteString("internal error\n")
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Content-Security-Policy", csp)
	hd.Set("Referrer-Policy", "same-origin")
	w.WriteHeader(code)
	_, _ = w.Write(b.Bytes())
}

var pageTmpl = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;padding:18px 24px;color:#1d232a;background:#fff}
h1{font-size:20px;margin:0 0 10px}
a{color:#175cd3}
code{font:12.5px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.mute{color:#67707a}
form.filter{display:flex;gap:10px;align-items:center;margin:0 0 14px}
input{font:inherit;padding:3px 6px;border:1px solid #c3c9d0;border-radius:4px}
input[type=number]{width:5em}
button{font:inherit;border:0;border-radius:4px;padding:4px 10px;cursor:pointer;background:#e4e7eb}
button.danger{background:#b42318;color:#fff}
table{border-collapse:collapse;width:100%}
th,td{border-bottom:1px solid #e1e5e9;padding:7px 8px;text-align:left;vertical-align:top}
th{background:#f4f6f8;font-size:12px;font-weight:600;color:#4b545e}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
ol,ul{margin:2px 0 0;padding-left:18px}
li{margin:0 0 2px}
form.release{display:flex;gap:6px}
form.release input{width:7em}
td.audit{min-width:12em}
button{white-space:nowrap}
td.key code{white-space:nowrap}
.small{font-size:12px;color:#67707a}
.small code{font-size:11.5px}
li .small{display:block}
.nowrap{white-space:nowrap}
.flash,.error{padding:8px 12px;border-radius:4px;margin:0 0 14px}
.flash{background:#ecfdf3;border:1px solid #75e0a7}
.error{background:#fef3f2;border:1px solid #fda29b}
.guard{padding:8px 12px;border-radius:4px;margin:0 0 14px;background:#fffaeb;border:1px solid #fec84b}
footer{margin-top:14px;font-size:12px}
</style>
</head>
<body>
<h1>{{.Title}}</h1>
{{if .ResultsPage}}<h2>Stored results</h2>
<p class="mute">The responses kept for idempotency keys, each by its lookup key: the operation, the caller (<code>~</code> for none) and a digest of the client's key, never the key or the response itself. Dropping one makes the next request with its idempotency key run again.</p>{{end}}
<form class="filter" method="get" action="{{.Root}}{{if .ResultsPage}}results{{end}}">
<label>Key prefix <input type="text" name="prefix" value="{{.Prefix}}" placeholder="{{if .ResultsPage}}idempotency:{{else}}productID:{{end}}"></label>
<label>Limit <input type="number" name="limit" value="{{if .Limit}}{{.Limit}}{{end}}" min="1" max="1000"></label>
<button type="submit">Show</button>
{{if .ResultsPage}}{{if or .Prefix .Error}}<a href="{{.Root}}results">all results</a>{{end}} <a href="{{.Root}}">locks</a>{{else}}{{if or .Prefix .Single .Error}}<a href="{{.Root}}">all locks</a>{{end}}{{if .KeepsResults}} <a href="{{.Root}}results">stored results</a>{{end}}{{end}}
</form>
{{with .Error}}<p class="error" role="alert">{{$.Status}} {{$.StatusText}}: {{.}}</p>{{end}}
{{with .GuardMillis}}<p class="guard" role="alert">Redis restarted without its data: no lock is taken for {{$.Millis .}} more (restart guard). Every acquisition meanwhile fails with 503 and Retry-After, so that no holder from before the restart, which Redis no longer remembers, has a second beside it.</p>{{end}}
{{with .Opened}}<p class="flash" role="status">Opened the gate of <code>{{.}}</code>: every instance sells it again.</p>{{end}}
{{with .Gates}}<h2>Sold out</h2>
<table class="gates"><thead><tr><th>Gate</th><th>Closed</th><th>Opens</th><th></th></tr></thead><tbody>
{{range .}}<tr><td class="key"><code>{{.Key}}</code></td><td><span title="{{$.Stamp .Since}}">{{$.Ago .Since}}</span></td><td>{{if .Until.IsZero}}when opened{{else}}<span title="{{$.Stamp .Until}}">{{$.Left .Until}}</span>{{end}}</td>
<td><form class="open" method="post" action="{{$.Root}}gates/{{$.Path .Key}}/open"><button type="submit">Open</button></form></td></tr>
{{end}}</tbody></table>{{end}}
{{with .Released}}<p class="flash" role="status">Force-released <code>{{.Key}}</code>, held by owner <code>{{.Owner}}</code> with fence {{.Fence}}; the key's last fencing token is now {{.NewFence}}. Reason: {{.Reason}}</p>{{end}}
{{if .Locks}}{{if not .Single}}<p class="mute">{{.Summary}}</p>{{end}}
<table>
<thead><tr><th>Key</th><th>Holder</th><th class="num">Fence, lease</th><th>Waiters, in order</th><th>Force-releases</th><th>Release</th></tr></thead>
<tbody>
{{range .Locks}}<tr>
<td class="key"><a href="{{$.Root}}locks/{{$.Path .Key}}"><code>{{.Key}}</code></a></td>
<td>{{range .Holders}}<code title="owner digest">{{.Owner}}</code>{{if gt .Count 1}} <b title="acquisitions holding it">×{{.Count}}</b>{{end}}{{if ne .Mode "exclusive"}} <span class="small nowrap" title="mode">{{.Mode}}{{with .Slot}} {{.}}{{end}}{{with .Permits}} of {{.}}{{end}}, fence {{.Fence}}</span>{{end}}
{{$h := .}}{{range $i, $id := .Instances}}<div class="small nowrap" title="instance, engine id {{$id}}">on <code class="instance">{{$.Instance $h.Names $i $id}}</code></div>{{end}}
{{with .Route}}<div class="small" title="route or method">via <code class="route">{{.}}</code></div>{{end}}{{with .Trace}}<div class="small nowrap" title="trace id">trace <code class="trace">{{.}}</code></div>{{end}}
{{if not .Since.IsZero}}<div class="small" title="since {{$.Stamp .Since}}">held {{$.For .Since}}</div>{{end}}{{else}}<span class="mute">free</span>{{end}}</td>
<td class="num">{{if .Held}}<code>{{.Fence}}</code><div>{{$.Millis .TTLMillis}} left</div>{{else}}–{{end}}<div class="small" title="the key's last fencing token">last {{.LastFence}}</div></td>
<td>{{with .Waiters}}{{len .}} waiting<ol>{{range .}}<li><code class="instance" title="instance, engine id {{.Instance}}">{{if .Name}}{{.Name}}{{else}}{{.Instance}}{{end}}</code>{{if ne .Mode "exclusive"}} <span class="small" title="mode">{{.Mode}}</span>{{end}} <span class="small nowrap" title="queued {{$.Stamp .Since}}, deadline {{$.Stamp .Deadline}}">waited {{$.For .Since}}, {{$.Left .Deadline}}</span>{{with .Route}}<div class="small" title="route or method">via <code class="route">{{.}}</code></div>{{end}}{{with .Trace}}<div class="small nowrap" title="trace id">trace <code class="trace">{{.}}</code></div>{{end}}</li>{{end}}</ol>{{else}}<span class="mute">none</span>{{end}}</td>
<td class="audit">{{with .Audit}}<ul>{{range .}}<li>{{.Reason}}<div class="small" title="{{$.Stamp .At}}">{{$.Ago .At}}, owner <code>{{.Owner}}</code>, fence {{.Fence}} → {{.NewFence}}</div></li>{{end}}</ul>{{else}}<span class="mute">none</span>{{end}}</td>
<td>{{if .Held}}<form class="release" method="post" action="{{$.Root}}locks/{{$.Path .Key}}/release"><input type="text" name="reason" required maxlength="256" placeholder="reason" aria-label="reason to release {{.Key}}"><button class="danger" type="submit">Release</button></form>{{end}}</td>
</tr>
{{end}}</tbody>
</table>
{{else if not (or .Error .Released .Opened .ResultsPage)}}<p class="mute">No lock is held or awaited{{with .Prefix}} under the prefix <code>{{.}}</code>{{end}}.</p>
{{end}}
{{if .ResultsPage}}{{with .Dropped}}<p class="flash" role="status">Dropped the stored result of <code>{{.}}</code>: the next request with its idempotency key runs again.</p>{{end}}
{{if .Results}}<p class="mute">{{.ResultCount}}</p>
<table class="results"><thead><tr><th>Lookup key</th><th class="num">Size</th><th>Expires</th><th>Drop</th></tr></thead><tbody>
{{range .Results}}<tr><td class="key"><code>{{.Key}}</code></td><td class="num">{{$.Bytes .Size}}</td><td>{{if .Expires.IsZero}}unknown{{else}}<span title="{{$.Stamp .Expires}}">{{$.Left .Expires}}</span>{{end}}</td>
<td><form class="drop" method="post" action="{{$.Root}}results/{{$.Path .Key}}/drop"><button class="danger" type="submit" title="the next request with this idempotency key runs again">Drop</button></form></td></tr>
{{end}}</tbody></table>
{{else if not .Error}}<p class="mute">No result is stored{{with .Prefix}} under the prefix <code>{{.}}</code>{{end}}.</p>
{{end}}{{if .More}}<p class="mute">Showing the first {{len .Results}} results: narrow the prefix or raise the limit to see more.</p>{{end}}
{{else if .More}}<p class="mute">Showing the first {{len .Locks}} locks: narrow the prefix or raise the limit to see more.</p>{{end}}
<footer class="mute">Read {{.Stamp .Now}} · <a href="{{.Self}}">refresh</a> · JSON: <a href="{{.Root}}locks">locks</a>, <a href="{{.Root}}gates">gates</a>{{if .KeepsResults}}, <a href="{{.Root}}results">results</a>{{end}}</footer>
</body>
</html>
`))
