package lifecycle

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/routelock/lock/lockcore"
)

// Serve returns the Core that takes its holds from b and owns their
// leases: it validates each Policy, re-enters in memory, mints owner
// tokens, makes the leases and their contexts, bounds them by MaxHold,
// and ends a lease when its hold is lost. ev is told of the holds' ends
// (Events.Ended); b tells it of its waits. When b is a Batch that
// declares Promises.Batch, several holds go in one exchange (AcquireAll,
// ReleaseAll).
func Serve(b lockcore.Engine, ev lockcore.Events) *Core {
	// Comparable by value, not only by type: a struct with an interface
	// field that holds a slice has a comparable type, and == would panic.
	g, _ := b.(lockcore.Gatekeeper)
	return &Core{b: b, ev: ev, gates: g, comparable: b != nil && reflect.ValueOf(b).Comparable()}
}

// Core is the Locker of an engine (Serve): it owns the leases of the
// engine's holds. It has no exported method but Acquire, so that a type
// in another package that embeds it (package lock's Locker does, under an
// unexported name) is a Locker without a method of its own beyond its
// Acquire; what the adapters ask of a Locker when a route is built, they
// ask through this package's functions (PromisesOf, GatesOf,
// RecordsRoute).
type Core struct {
	b          lockcore.Engine
	ev         lockcore.Events
	gates      lockcore.Gatekeeper // b, when it has gates
	comparable bool                // b can be compared (sameBackend)
	records    bool                // RecordRoutes
	defaults   Policy              // SetDefaults
	results    []ResultObserver    // ObserveResults
}

func (c *Core) core() *Core { return c }

// SetDefaults makes d the Policy of c's routes and methods (package
// lock's Defaults): each field a route or method leaves zero is taken from
// d (Over), and d's MaxHold is a ceiling that they cannot lift. d is valid,
// and neither shares nor splits the lock nor restocks.
func SetDefaults(c *Core, d Policy) { c.defaults = d }

// Over returns p over the defaults of l (SetDefaults), unless p was
// prepared for l (Prepare) and is over them already.
func Over(l Locker, p Policy) Policy {
	c := l.core()
	if p.prepared == c {
		return p
	}
	q := p.Or(c.defaults)
	if d := c.defaults.MaxHold; d > 0 && q.MaxHold > d {
		q.MaxHold = d
	}
	return q
}

// Prepare returns p over the defaults of l (Over), checked once, where a
// route or method is built: valid (Policy.Validate), and asking only for
// what l's engine promises (a Share needs Promises.Shared for readers,
// Promises.Permits for permits). An acquisition through l, or a Locker on
// its Core, with the Policy returned neither merges the defaults nor
// checks it again, as long as nobody changes it on the way (an Observer
// that changes it has it checked again: Recheck). The error matches
// ErrMisconfigured.
func Prepare(l Locker, p Policy) (Policy, error) {
	c := l.core()
	if p.prepared == c {
		return p, nil
	}
	p = Over(l, p)
	if err := p.Validate(); err != nil {
		return p, err
	}
	if err := c.refusal(p); err != nil {
		return p, err
	}
	p.prepared = c
	return p, nil
}

// Recheck returns p as one that was never prepared (Prepare): an
// acquisition with it checks it.
func Recheck(p Policy) Policy {
	p.prepared = nil
	return p
}

// refusal returns an error matching ErrMisconfigured when c's engine does
// not promise to serve p, and nil when it does.
func (c *Core) refusal(p Policy) error {
	var what string
	switch ps := c.b.Promises(); {
	case p.Share == ShareAll && !ps.Shared:
		what = "shared holds (lockcore.Promises.Shared)"
	case p.Share > 0 && !ps.Permits:
		what = "permits (lockcore.Promises.Permits)"
	default:
		return nil
	}
	return fmt.Errorf("%w: Share %d: the engine (%T) does not promise %s", lockcore.ErrMisconfigured, p.Share, c.b, what)
}

// RecordRoutes says that the acquisitions of c are labelled with their
// route (Policy.Route) for someone who reads it: observers of package
// lock's Locker (lockotel's spans and metrics carry it). An engine that is
// a lockcore.Operator records routes for operators anyway (RecordsRoute).
func RecordRoutes(c *Core) { c.records = true }

// RecordsRoute reports whether the acquisitions of l are labelled with
// their route (Policy.Route), for observers (RecordRoutes) or for
// operators (an engine that is a lockcore.Operator, as the Redis engine
// is): the middleware finds each request's route template only then.
func RecordsRoute(l Locker) bool {
	c := l.core()
	_, op := c.b.(lockcore.Operator)
	return c.records || op
}

// PromisesOf returns what the engine of l promises: routes that ask for
// more fail where they are built.
func PromisesOf(l Locker) lockcore.Promises { return l.core().b.Promises() }

// GatesOf returns the gates of l's engine when it is a
// lockcore.Gatekeeper (the Redis engine is), or nil: segments and the
// sold-out gate find them so.
func GatesOf(l Locker) lockcore.Gatekeeper { return l.core().gates }

// gated returns the error that refuses r when its resource's gate is
// closed, or the engine cannot tell (GateOf): the one check of a gate,
// before the engine is asked, which r then carries (GateChecked). Readers
// pass a closed gate, as they only look, and so do restocks. An engine
// whose gates c does not know (a wrapper that is no Gatekeeper) checks
// in Take.
func (s *Core) gated(ctx context.Context, r *lockcore.Request) error {
	if s.gates == nil || r.Share < 0 || r.Restock {
		return nil
	}
	if _, err := s.gates.GateOf(ctx, r.Key); err != nil {
		return err
	}
	r.GateChecked = true
	return nil
}

// sameBackend reports whether a and b take their holds from one backend,
// so that a hold one made, the other re-enters in memory: Lockers that
// share an engine are one lock to a request, and so are a Locker and its
// wrappers. Backends that cannot be compared are told apart by the Core
// that serves them.
func sameBackend(a, b Locker) bool {
	ca, cb := a.core(), b.core()
	return ca == cb || ca.comparable && cb.comparable && ca.b == cb.b
}

// request is the Request of an acquisition of key with p under ctx.
func (s *Core) request(ctx context.Context, key lockcore.Key, p Policy, join []string) (lockcore.Request, error) {
	if p.prepared != s {
		if err := s.refusal(p); err != nil {
			return lockcore.Request{}, err
		}
	}
	return lockcore.Request{Key: key, Token: NewToken(), Join: join, Share: p.Share, TTL: p.TTL, Wait: p.Wait,
		Route: p.Route, Trace: p.Trace, Restock: p.Restock, Set: inSet(ctx)}, nil
}

func (s *Core) Acquire(ctx context.Context, key lockcore.Key, p Policy) (*Lease, error) {
	ls, p, err := begin(ctx, s, key, p)
	if ls != nil || err != nil {
		return ls, err
	}
	r, err := s.request(ctx, key, p, TokensFrom(ctx))
	if err != nil {
		return nil, err
	}
	r.Result = wantsResult(ctx, key)
	if err := s.gated(ctx, &r); err != nil {
		return nil, err
	}
	t, err := s.b.Take(ctx, r)
	if err != nil {
		return nil, err // a *lockcore.ResultFound among them
	}
	return s.lease(ctx, r, t, p.MaxHold), nil
}

// lease makes the lease of t, taken for r under ctx.
func (s *Core) lease(ctx context.Context, r lockcore.Request, t lockcore.Hold, maxHold time.Duration) *Lease {
	tok := r.Token
	if len(r.Join) > 0 {
		// It may have re-entered one of them; their holds left the process
		// already, so reading it exposes nothing.
		tok = t.Token()
	}
	ls := newLease(ctx, s, r.Key, tok, t, s.ev)
	if r.Set && inSegment(ctx) {
		ls.h.set = &movable{req: r} // a segment's hold may move (NextSegment)
	}
	select {
	case <-t.Done():
		ls.h.watch() // lost before it was handed out: its handler never runs
	default:
		go ls.h.watch()
	}
	limitHold(ls, maxHold)
	return ls
}

// AcquireGroup takes the locks of keys in one exchange, when c's engine
// is a Batch (see groupAcquirer), for a wrapper of c that observes it.
func AcquireGroup(ctx context.Context, c *Core, keys []lockcore.Key, p Policy) ([]*Lease, error) {
	return c.acquireGroup(ctx, keys, p)
}

func (s *Core) acquireGroup(ctx context.Context, keys []lockcore.Key, p Policy) ([]*Lease, error) {
	b, ok := s.b.(lockcore.Batch)
	if !ok || !s.b.Promises().Batch || p.prepared != s && p.Validate() != nil {
		return nil, nil
	}
	join := TokensFrom(ctx)
	rs := make([]lockcore.Request, len(keys))
	for i, k := range keys {
		if (k == lockcore.Key{}) || holds(ctx, s, k) {
			return nil, nil // one by one: refused, or re-entered in memory
		}
		r, err := s.request(ctx, k, p, join)
		if err != nil {
			return nil, nil // one by one, each refused
		}
		if err := s.gated(ctx, &r); err != nil {
			// A closed gate refuses the lot before any call, whether or
			// not they could go together.
			return nil, err
		}
		rs[i] = r
	}
	ts, err := b.TakeAll(ctx, rs)
	if ts == nil || err != nil {
		return nil, err
	}
	leases := make([]*Lease, len(ts))
	for i, t := range ts {
		leases[i] = s.lease(ctx, rs[i], t, p.MaxHold)
		ctx = leases[i].Context()
	}
	return leases, nil
}

// releaseHolds releases the backend holds of hs, each once, as free
// would; those its holders released go together to a Batch backend that
// declares Promises.Batch, as AcquireGroup asks only such a one.
func (s *Core) releaseHolds(ctx context.Context, hs []*held) []error {
	errs := make([]error, len(hs))
	b, ok := s.b.(lockcore.Batch)
	ok = ok && s.b.Promises().Batch
	var (
		ts []lockcore.Hold
		at []int
	)
	for i, h := range hs {
		if early := h.early(); !ok || early != nil {
			errs[i] = h.at().t.Release(ctx, early)
			continue
		}
		ts, at = append(ts, h.at().t), append(at, i)
	}
	if len(ts) > 0 {
		for i, err := range b.ReleaseAll(ctx, ts) {
			errs[at[i]] = err
		}
	}
	return errs
}
