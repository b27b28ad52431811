//go:build long

package redisengine

import "time"

// fenceOptions returns the options of the fencing checker's Engines:
// leases of ttl, which also bounds the restart guard after a restart
// without persistence, a fence retention of ret (0: the default), and a
// claim window that grants a waiter told by message the whole ttl, so
// that the waiter behind the skipped ones gets the token the release drew
// for it, however long the skipping took within half a ttl. It is the
// checker's one use of an option younger than the fencing tokens' scale
// (MaxTTL), so that the checker runs unchanged against the scripts of
// before it, with a copy of this file that leaves MaxTTL out.
func fenceOptions(ttl, ret time.Duration) Options {
	return Options{TTL: ttl, MaxTTL: ttl, ClaimWindow: 2 * ttl, FenceRetention: ret}
}
