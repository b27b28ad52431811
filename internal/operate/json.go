package operate

import (
	"context"
	"time"

	"github.com/routelock/lock/lockcore"
)

// The types below are the JSON that package admin answers and that the
// routelock command prints with -json: one schema for both, which admin's
// package documentation describes field by field for clients. Their field
// tags, the fields' order and the value forms are the wire format; the
// golden tests of both pin it.

// Lock is the JSON form of a lockcore.Info: the state of one lock. Slices
// are never null; times are RFC 3339 with nanoseconds in UTC, left out when
// the backend does not know them; durations are whole milliseconds.
type Lock struct {
	// Key is the escaped key, as lockcore.Key.String prints it.
	Key string `json:"key"`
	// Held reports whether anyone holds the lock.
	Held bool `json:"held"`
	// Holders are the owners holding it: one for a held lock.
	Holders []Holder `json:"holders"`
	// Fence is the current hold's fencing token, 0 when free.
	Fence int64 `json:"fence"`
	// LastFence is the key's fencing counter, 0 if none is remembered.
	LastFence int64 `json:"last_fence"`
	// TTLMillis is the hold's remaining lease in milliseconds, 0 when free.
	TTLMillis int64 `json:"ttl_ms"`
	// Waiters are the queued acquisitions, first in line first.
	Waiters []Waiter `json:"waiters"`
	// Audit holds the latest force-releases of the key, newest first.
	Audit []Revocation `json:"audit"`
	// RestartGuardMillis is how long the restart guard still refuses
	// fresh locks (lockcore.RestartGuarder), in milliseconds, on a lock
	// answered alone; left out when 0 and in a List, which has its own.
	RestartGuardMillis int64 `json:"restart_guard_ms,omitempty"`
}

// Holder is the JSON form of a lockcore.Holder. It names the owner by a
// digest, never by its token.
type Holder struct {
	Owner     string    `json:"owner"`             // digest of the owner token
	Count     int       `json:"count"`             // acquisitions holding it
	Instances []string  `json:"instances"`         // engine ids of the processes
	Names     []string  `json:"names"`             // their instance names, "" where unknown
	Route     string    `json:"route,omitempty"`   // route or gRPC method that took the hold
	Trace     string    `json:"trace,omitempty"`   // trace id of the request that took it
	Since     time.Time `json:"since,omitzero"`    // when the hold was taken
	Mode      string    `json:"mode"`              // exclusive, shared or permit (Mode)
	Permits   int       `json:"permits,omitempty"` // a permit's n
	Slot      *int      `json:"slot,omitempty"`    // a permit's slot
	Fence     int64     `json:"fence,omitempty"`   // the hold's fencing token
}

// Waiter is the JSON form of a lockcore.Waiter.
type Waiter struct {
	Instance string    `json:"instance"`          // engine id of the process
	Name     string    `json:"name,omitempty"`    // its instance name
	Route    string    `json:"route,omitempty"`   // route or gRPC method that waits
	Trace    string    `json:"trace,omitempty"`   // trace id of the request that waits
	Since    time.Time `json:"since,omitzero"`    // when it queued
	Deadline time.Time `json:"deadline,omitzero"` // when it gives up
	Mode     string    `json:"mode"`              // exclusive, shared or permit (Mode)
	Permits  int       `json:"permits,omitempty"` // a permit's n
}

// Mode names the mode of a hold or waiter of Policy.Share share:
// "exclusive" (0), "shared" (-1) or "permit" (n > 0).
func Mode(share int) string {
	switch {
	case share == 0:
		return "exclusive"
	case share < 0:
		return "shared"
	}
	return "permit"
}

// Revocation is the JSON form of a lockcore.Revocation: the audit record
// of one force-release, and the answer to one.
type Revocation struct {
	Key      string    `json:"key"`         // escaped key
	Owner    string    `json:"owner"`       // revoked owner's digest
	Fence    int64     `json:"fence"`       // revoked hold's fencing token
	NewFence int64     `json:"new_fence"`   // the key's counter afterwards
	Reason   string    `json:"reason"`      // the operator's reason
	At       time.Time `json:"at,omitzero"` // when, by the backend's clock
}

// List is the JSON form of an Operator's List: the locks in key order, and
// whether the limit left some out.
type List struct {
	Locks []Lock `json:"locks"`
	More  bool   `json:"more"`
	// RestartGuardMillis is how long the restart guard still refuses
	// fresh locks (lockcore.RestartGuarder), in milliseconds; left out
	// when 0: no guard, or an engine that keeps none.
	RestartGuardMillis int64 `json:"restart_guard_ms,omitempty"`
}

// Error is the body of every JSON error response of package admin.
type Error struct {
	Error string `json:"error"`
}

// FromInfo converts an Operator's lockcore.Info to its JSON form.
func FromInfo(in lockcore.Info) Lock {
	l := Lock{
		Key:       in.Key,
		Held:      (len(in.Holders) > 0),
		Holders:   make([]Holder, len(in.Holders)),
		Fence:     in.Fence,
		LastFence: in.LastFence,
		TTLMillis: in.TTL.Milliseconds(),
		Waiters:   make([]Waiter, len(in.Waiters)),
		Audit:     make([]Revocation, len(in.Audit)),
	}
	for i, h := range in.Holders {
		inst := h.Instances
		if inst == nil {
			inst = []string{}
		}
		names := make([]string, len(inst))
		copy(names, h.Names)
		l.Holders[i] = Holder{Owner: h.Owner, Count: h.Count, Instances: inst, Names: names, Route: h.Route, Trace: h.Trace,
			Since: utc(h.Since), Mode: Mode(h.Share), Permits: max(h.Share, 0), Fence: h.Fence}
		if h.Share > 0 {
			slot := h.Slot
			l.Holders[i].Slot = &slot
		}
	}
	for i, w := range in.Waiters {
		l.Waiters[i] = Waiter{Instance: w.Instance, Name: w.Name, Route: w.Route, Trace: w.Trace, Since: utc(w.Since), Deadline: utc(w.Deadline), Mode: Mode(w.Share), Permits: max(w.Share, 0)}
	}
	for i, r := range in.Audit {
		l.Audit[i] = FromRevocation(r)
	}
	return l
}

// FromRevocation converts a lockcore.Revocation to its JSON form.
func FromRevocation(r lockcore.Revocation) Revocation {
	return Revocation{Key: r.Key, Owner: r.Owner, Fence: r.Fence, NewFence: r.NewFence, Reason: r.Reason, At: utc(r.At)}
}

func utc(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC()
}

// Gate is the JSON form of a closed gate (lockcore.Gate): a resource sold
// out, refused at once by every instance.
type Gate struct {
	Key   string    `json:"key"`            // escaped key
	Since time.Time `json:"since"`          // when it was closed
	Until time.Time `json:"until,omitzero"` // when it opens by itself; absent: when opened
}

// Gates is the JSON form of the closed gates, in key order.
type Gates struct {
	Gates []Gate `json:"gates"`
}

// Opened is the answer to the opening of a gate.
type Opened struct {
	Opened string `json:"opened"` // escaped key
}

// FromGates converts closed gates to their JSON form.
func FromGates(gs []lockcore.Gate) Gates {
	out := Gates{Gates: make([]Gate, len(gs))}
	for i, g := range gs {
		out.Gates[i] = Gate{Key: g.Key.String(), Since: utc(g.Since), Until: utc(g.Until)}
	}
	return out
}

// RestartGuard returns how long the restart guard of op still refuses
// fresh locks, when op is a lockcore.RestartGuarder, rounded up to the
// millisecond (a guard that still lives never shows as none): 0 when it
// does not, and when op keeps no guard; op's error when it cannot say.
func RestartGuard(ctx context.Context, op lockcore.Operator) (time.Duration, error) {
	g, ok := op.(lockcore.RestartGuarder)
	if !ok {
		return 0, nil
	}
	left, err := g.RestartGuard(ctx)
	if err != nil {
		return 0, err
	}
	return max(left+time.Millisecond-1, 0).Truncate(time.Millisecond), nil
}

// Result is the JSON form of a lockcore.StoredResult: a stored result as
// an operator sees it, by its lookup key, never by its content.
type Result struct {
	Key     string    `json:"key"`              // escaped lookup key, as stored
	Size    int64     `json:"size"`             // bytes stored
	Expires time.Time `json:"expires,omitzero"` // when the backend drops it by itself
}

// Results is the JSON form of a lockcore.Results' StoredResults: the
// stored results in key order, and whether the limit left some out.
type Results struct {
	Results []Result `json:"results"`
	More    bool     `json:"more"`
}

// Dropped is the answer to the drop of a stored result.
type Dropped struct {
	Dropped string `json:"dropped"` // escaped lookup key
}

// FromStoredResults converts stored results to their JSON form.
func FromStoredResults(rs []lockcore.StoredResult, more bool) Results {
	out := Results{Results: make([]Result, len(rs)), More: more}
	for i, r := range rs {
		out.Results[i] = Result{Key: r.Key.String(), Size: r.Size, Expires: utc(r.Expires)}
	}
	return out
}

// ResultsOf returns op as a lockcore.Results when its engine keeps
// results (it is one, and declares Promises.Results), as an engine that
// serves idempotency keys does; false otherwise.
func ResultsOf(op lockcore.Operator) (lockcore.Results, bool) {
	rs, ok := op.(lockcore.Results)
	if !ok || !rs.Promises().Results {
		return nil, false
	}
	return rs, true
}
