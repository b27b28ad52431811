package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/bench"
)

// serverCounters is what one Redis server says of its own work so far: its
// CPU time, user and system, in seconds, and the commands it ran, those
// inside scripts included, without INFO (the meter's own).
type serverCounters struct {
	cpu   float64
	calls int64
}

// serverMeter reads the counters of a single server, to charge a
// measurement the server's work per cycle.
type serverMeter struct{ c redis.UniversalClient }

// newServerMeter returns a meter of t's server, or nil when t is not one
// server (a Cluster's or a Sentinel set-up's work is spread over several).
func newServerMeter(t bench.Target) (*serverMeter, error) {
	if t.Deployment() != bench.Single {
		return nil, nil
	}
	var n atomic.Int64
	c, err := t.Client(0, false, &n)
	if err != nil {
		return nil, err
	}
	return &serverMeter{c}, nil
}

func (m *serverMeter) close() {
	if m != nil {
		_ = m.c.Close()
	}
}

// counters returns the server's counters now; none from a nil meter.
func (m *serverMeter) counters() (serverCounters, error) {
	if m == nil {
		return serverCounters{}, nil
	}
	ctx, cancel := context.WithTimeout(ctxBG, 5*time.Second)
	defer cancel()
	info, err := m.c.Info(ctx, "cpu", "commandstats").Result()
	if err != nil {
		return serverCounters{}, err
	}
	return parseServerCounters(info)
}

// parseServerCounters reads used_cpu_user, used_cpu_sys and the calls of
// every cmdstat_ line but INFO's from the text of INFO cpu commandstats.
func parseServerCounters(info string) (serverCounters, error) {
	var c serverCounters
	var cpus int
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		name, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case name == "used_cpu_user" || name == "used_cpu_sys":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return serverCounters{}, fmt.Errorf("INFO %s: %w", name, err)
			}
			c.cpu += f
			cpus++
		case strings.HasPrefix(name, "cmdstat_") && name != "cmdstat_info":
			calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
			n, err := strconv.ParseInt(calls, 10, 64)
			if err != nil || !strings.HasPrefix(v, "calls=") {
				return serverCounters{}, fmt.Errorf("INFO %s: no calls in %q", name, v)
			}
			c.calls += n
		}
	}
	if cpus != 2 {
		return serverCounters{}, fmt.Errorf("INFO cpu: used_cpu_user and used_cpu_sys not both there")
	}
	return c, nil
}
