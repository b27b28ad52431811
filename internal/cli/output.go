package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/routelock/lock/internal/humantime"
	"github.com/routelock/lock/internal/operate"
	"github.com/routelock/lock/lockcore"
)

// printer writes the human output: aligned tables, times in UTC beside
// how long ago they were.
type printer struct {
	w   io.Writer
	now time.Time
	e   error // the first write error
}

func newPrinter(w io.Writer, now time.Time) *printer { return &printer{w: w, now: now} }

func (p *printer) err() error { return p.e }

// table returns a tabwriter for one table; flush it with p.flush.
func (p *printer) table() *tabwriter.Writer {
	return tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
}

func (p *printer) flush(tw *tabwriter.Writer) {
	if err := tw.Flush(); err != nil && p.e == nil {
		p.e = err
	}
}

func (p *printer) printf(format string, a ...any) {
	if _, err := fmt.Fprintf(p.w, format, a...); err != nil && p.e == nil {
		p.e = err
	}
}

// guard prints, when the restart guard refuses fresh locks for left more,
// a line that says so; nothing when left is 0.
func (p *printer) guard(left time.Duration) {
	if left > 0 {
		p.printf("Redis restarted without its data: no lock is taken for %s more (restart guard)\n", humantime.Duration(left))
	}
}

// list prints one line per lock.
func (p *printer) list(infos []lockcore.Info) {
	if len(infos) == 0 {
		p.printf("no lock is held or awaited\n")
		return
	}
	tw := p.table()
	fmt.Fprintln(tw, "KEY\tHOLDER\tINSTANCE\tROUTE\tCOUNT\tFENCE\tTTL\tHELD FOR\tWAITERS")
	for _, in := range infos {
		if len(in.Holders) == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t-\t%d\n", clean(in.Key), len(in.Waiters))
			continue
		}
		h := in.Holders[0]
		owner := clean(h.Owner)
		if len(in.Holders) > 1 {
			owner += fmt.Sprintf(" +%d %s", len(in.Holders)-1, operate.Mode(h.Share))
		}
		inst := "-"
		if len(h.Instances) > 0 {
			inst = instance(h.Names, 0, h.Instances[0])
			if len(h.Instances) > 1 {
				inst += fmt.Sprintf(" +%d", len(h.Instances)-1)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%d\n", clean(in.Key), owner, inst, orDash(h.Route), h.Count, in.Fence, humantime.Duration(in.TTL), p.since(h.Since), len(in.Waiters))
	}
	p.flush(tw)
}

// modeOf describes the mode of a holder that shares its lock: ", shared",
// ", permit 2 of 4"; "" for an exclusive one.
func modeOf(h lockcore.Holder) string {
	switch {
	case h.Share < 0:
		return fmt.Sprintf(", shared, fence %d", h.Fence)
	case h.Share > 0:
		return fmt.Sprintf(", permit %d of %d, fence %d", h.Slot, h.Share, h.Fence)
	}
	return ""
}

// lock prints one lock, with its waiters and its audit records.
func (p *printer) lock(in lockcore.Info) {
	tw := p.table()
	fmt.Fprintf(tw, "key:\t%s\n", clean(in.Key))
	if len(in.Holders) == 0 {
		fmt.Fprintf(tw, "state:\tfree\n")
	} else {
		fmt.Fprintf(tw, "state:\theld\n")
		for _, h := range in.Holders {
			fmt.Fprintf(tw, "holder:\t%s, %s%s, on %s, since %s\n", clean(h.Owner), plural(h.Count, "acquisition"), modeOf(h), instances(h), p.stamp(h.Since))
			if h.Route != "" {
				fmt.Fprintf(tw, "  route:\t%s\n", clean(h.Route))
			}
			if h.Trace != "" {
				fmt.Fprintf(tw, "  trace:\t%s\n", clean(h.Trace))
			}
		}
		fmt.Fprintf(tw, "fence:\t%d\n", in.Fence)
		fmt.Fprintf(tw, "ttl:\t%s\n", humantime.Duration(in.TTL))
	}
	fmt.Fprintf(tw, "last fence:\t%d\n", in.LastFence)
	fmt.Fprintf(tw, "waiters:\t%d\n", len(in.Waiters))
	p.flush(tw)
	if len(in.Waiters) > 0 {
		tw = p.table()
		fmt.Fprintln(tw, "  #\tINSTANCE\tMODE\tQUEUED\tGIVES UP\tROUTE\tTRACE")
		for i, w := range in.Waiters {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\n", i+1, named(w.Name, w.Instance), operate.Mode(w.Share), p.ago(w.Since), p.until(w.Deadline), orDash(w.Route), orDash(w.Trace))
		}
		p.flush(tw)
	}
	p.printf("force-releases: %d\n", len(in.Audit))
	if len(in.Audit) > 0 {
		tw = p.table()
		fmt.Fprintln(tw, "  AT\tOWNER\tFENCE\tNEW FENCE\tREASON")
		for _, r := range in.Audit {
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%s\n", p.stamp(r.At), clean(r.Owner), r.Fence, r.NewFence, clean(r.Reason))
		}
		p.flush(tw)
	}
}

// gates prints the closed gates, a line each.
func (p *printer) gates(gs []lockcore.Gate) {
	if len(gs) == 0 {
		p.printf("no gate is closed\n")
		return
	}
	tw := p.table()
	fmt.Fprintf(tw, "KEY\tCLOSED\tOPENS\n")
	for _, g := range gs {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", clean(g.Key.String()), p.stamp(g.Since), p.ahead(g.Until, "when opened"))
	}
	p.flush(tw)
}

// results prints the stored results, a line each: the lookup key, the
// size and when it expires.
func (p *printer) results(rs []lockcore.StoredResult) {
	if len(rs) == 0 {
		p.printf("no result is stored\n")
		return
	}
	tw := p.table()
	fmt.Fprintf(tw, "KEY\tBYTES\tEXPIRES\n")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%d\t%s\n", clean(r.Key.String()), r.Size, p.ahead(r.Expires, "-"))
	}
	p.flush(tw)
}

// ahead returns t in UTC and how long until it, or none for the zero time.
func (p *printer) ahead(t time.Time, none string) string {
	if t.IsZero() {
		return none
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z") + " (" + p.until(t) + ")"
}

// revocation prints what a force-release did.
func (p *printer) revocation(r lockcore.Revocation) {
	p.printf("released %s: it was held by owner %s with fence %d; the key's last fencing token is now %d\n",
		clean(r.Key), clean(r.Owner), r.Fence, r.NewFence)
}

// stamp formats t as a UTC time and how long ago it was.
func (p *printer) stamp(t time.Time) string {
	if t.IsZero() {
		return "an unknown time"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z") + " (" + p.ago(t) + ")"
}

func (p *printer) since(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	// A hold's start comes from its engine's clock, which may run a few ms
	// ahead of the server's, by which now is read.
	return humantime.Duration(max(p.now.Sub(t), 0))
}

func (p *printer) ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := p.now.Sub(t)
	if d < time.Millisecond {
		return "just now"
	}
	return humantime.Duration(d) + " ago"
}

func (p *printer) until(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := t.Sub(p.now)
	if d < time.Millisecond {
		return "now"
	}
	return "in " + humantime.Duration(d)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// instances names the instances of h: each by its instance name and
// engine id, "pod-a (033a2e7db54e2a2f)", or by its engine id alone when
// its name is not known.
func instances(h lockcore.Holder) string {
	if len(h.Instances) == 0 {
		return "an unknown instance"
	}
	out := make([]string, len(h.Instances))
	for i, id := range h.Instances {
		out[i] = instance(h.Names, i, id)
	}
	return strings.Join(out, ", ")
}

// instance names the i-th instance, of engine id id, of a holder whose
// instance names are names (see instances).
func instance(names []string, i int, id string) string {
	name := ""
	if i < len(names) {
		name = names[i]
	}
	return named(name, id)
}

// named names an instance by its name and engine id (see instances).
func named(name, id string) string {
	if name == "" || name == id {
		return clean(id)
	}
	return clean(name) + " (" + clean(id) + ")"
}

// orDash returns s made safe for a table, or "-" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return clean(s)
}

// clean makes s safe for a terminal and a table: control characters
// (escape sequences, tabs, newlines) and invalid UTF-8 are written as Go
// escapes.
func clean(s string) string {
	ok := true
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) {
			ok = false
			break
		}
	}
	if ok {
		return s
	}
	q := strconv.QuoteToGraphic(s)
	return q[1 : len(q)-1]
}
