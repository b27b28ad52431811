//go:build long

package redisengine

import "time"

// fenceOptions returns the options of the fencing checker's Engines:
// leases of ttl, which also bounds the restart guard after a restart
// without persistence, and a fence retention of ret (0: the default). It
// is the checker's one use of an option younger than the fencing tokens'
// scale, so that the checker runs unchanged against the scripts of
// before it, with a copy of this file that sets TTL alone.
func fenceOptions(ttl, ret time.Duration) Options {
	return Options{TTL: ttl, MaxTTL: ttl, FenceRetention: ret}
}
