package lockotel

import (
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Attribute keys of spans, events and metrics.
const (
	attrResource  = "lock.resource"
	attrRoute     = "lock.route"
	attrMode      = "lock.mode"
	attrOutcome   = "lock.outcome"
	attrWait      = "lock.wait"
	attrReentered = "lock.reentered"
	attrFence     = "lock.fence"
	attrShare     = "lock.share"
	attrSlot      = "lock.slot"
	attrKey       = "lock.key"
	attrHeld      = "lock.held"
	attrReason    = "lock.reason"
	attrSource    = "lock.source"
)

var (
	modeWait     = attribute.String(attrMode, "wait")
	modeFailFast = attribute.String(attrMode, "fail_fast")
)

// kind says which attributes a metric measurement carries.
type kind uint8

const (
	kindAcquire  kind = iota // resource, route, outcome
	kindResource             // resource
	kindLost                 // resource, reason
	kindRenewal              // resource, outcome
	kindWake                 // resource, source
)

// setKey names one attribute set of a measurement.
type setKey struct {
	kind                   kind
	resource, route, value string
}

// measure is the options of measurements with one attribute set, made
// once: passing a slice made beforehand as the variadic options allocates
// nothing.
type measure struct {
	add []metric.AddOption
	rec []metric.RecordOption
	obs []metric.ObserveOption

	// Of a resource's set (kindResource): its holds and waits live now,
	// which routelock.held and routelock.waiting report when collected,
	// so that a request pays an atomic add for them, not a measurement.
	held, waiting atomic.Int64
}

func newMeasure(k setKey) *measure {
	kvs := make([]attribute.KeyValue, 0, 3)
	kvs = append(kvs, attribute.String(attrResource, k.resource))
	switch k.kind {
	case kindAcquire:
		if k.route != "" {
			kvs = append(kvs, attribute.String(attrRoute, k.route))
		}
		kvs = append(kvs, attribute.String(attrOutcome, k.value))
	case kindLost:
		kvs = append(kvs, attribute.String(attrReason, k.value))
	case kindRenewal:
		kvs = append(kvs, attribute.String(attrOutcome, k.value))
	case kindWake:
		kvs = append(kvs, attribute.String(attrSource, k.value))
	}
	o := metric.WithAttributeSet(attribute.NewSet(kvs...))
	return &measure{add: []metric.AddOption{o}, rec: []metric.RecordOption{o}, obs: []metric.ObserveOption{o}}
}

// otherResource names, in routelock.held and routelock.waiting, the
// resources met after the cache was full.
const otherResource = "_other"

// maxCached bounds the attribute sets an attrCache keeps. Resource names
// and routes come from the program's configuration, so a program has far
// fewer; past the bound, sets are made for each measurement. A variable,
// for the tests.
var maxCached = 4096

// attrCache keeps the measure of each attribute set met so far, in a map
// that is replaced, never changed: reads take no lock and allocate
// nothing.
type attrCache struct {
	m     atomic.Pointer[map[setKey]*measure]
	mu    sync.Mutex // serialises writers
	other *measure   // the resources' set past the bound; guarded by mu
}

// get returns the measure of the attributes of kind for resource, route
// and value.
func (c *attrCache) get(kind kind, resource, route, value string) *measure {
	k := setKey{kind: kind, resource: resource, route: route, value: value}
	if m := c.m.Load(); m != nil {
		if v := (*m)[k]; v != nil {
			return v
		}
	}
	return c.add(k)
}

func (c *attrCache) add(k setKey) *measure {
	v := newMeasure(k)
	c.mu.Lock()
	defer c.mu.Unlock()
	var old map[setKey]*measure
	if p := c.m.Load(); p != nil {
		old = *p
	}
	if w := old[k]; w != nil {
		return w
	}
	if len(old) >= maxCached {
		if k.kind != kindResource {
			return v
		}
		// Live counts must be observed: they share one set.
		if c.other == nil {
			c.other = newMeasure(setKey{kind: kindResource, resource: otherResource})
		}
		return c.other
	}
	m := make(map[setKey]*measure, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[k] = v
	c.m.Store(&m)
	return v
}

// resources calls f with the measure of each resource's set.
func (c *attrCache) resources(f func(*measure)) {
	if p := c.m.Load(); p != nil {
		for k, v := range *p {
			if k.kind == kindResource {
				f(v)
			}
		}
	}
	c.mu.Lock()
	other := c.other
	c.mu.Unlock()
	if other != nil {
		f(other)
	}
}
