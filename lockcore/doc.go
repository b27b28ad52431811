// Package lockcore is the lock engine of routelock: reentrant, fenced,
// watchdog-renewed locks on Redis, with fail-fast and blocking acquisition.
// It knows nothing of HTTP or gRPC; the middleware and interceptor packages
// build on it.
//
// # Owners and reentrancy
//
// A lock is held by an owner token, a random UUID that a request carries in
// its context.Context (see WithToken and TokenFrom). An acquisition of a key
// that the same token already holds re-enters the lock: the hold's count in
// Redis goes up by one, so the nested caller may be another process that
// received the token. Each release takes one count away; the key is freed
// when the count reaches zero. A token that holds nothing grants nothing.
//
// # Data layout
//
// A lock on key K with prefix P uses three Redis keys that share the hash tag
// {K}, so each script touches one Redis Cluster slot:
//
//	P{K}     string  the hold: owner token, attempt id, fencing token, and
//	                 the count and a waiters flag when needed
//	P{K}:q   zset    waiters in arrival order
//	P{K}:f   string  fencing counter (lives Options.FenceRetention)
//
// Acquire and release are one EVALSHA each. The hold is a string because
// that is what Redis sets and deletes fastest: an uncontended acquire is
// one INCR of the counter and one SET NX of the hold, a release one GET and
// one DEL. Shared locks and permits (several holders) will keep a hash of
// holders under the same name, which an exclusive acquire meets as a
// WRONGTYPE reply; the queue leaves room for FIFO-fair waiting and for
// multi-key locks.
//
// # Waiting
//
// A blocked acquisition queues itself in Redis in the same call that found the
// lock taken. A release that frees the lock hands it to the oldest waiter in
// Redis, in the release script, and publishes the hand-over on the waiter
// Locker's notification channel. Each Locker has one subscription
// connection for all of its waiters, and the woken waiter already holds the
// lock: no further round trip, and no herd of retries. When the waiter
// belongs to the releasing Locker, nothing is published: the release's reply
// names it and the releasing goroutine wakes it. Because pub/sub can lose
// messages, a waiter also asks Redis again when the holder's lease would
// have run out and whenever the subscription is re-established; when a
// release's reply is lost, the Locker's waiters on that key ask at once.
//
// # Watchdog and fencing
//
// One goroutine per Locker renews all held leases in batched pipelines at
// about TTL/3. A lease that is gone or owned by someone else when renewed is
// lost, and so is one whose renewals keep failing until a safety margin
// before its TTL would run out: its context is cancelled with cause
// ErrLockLost. Every fresh hold gets a fencing token greater than all earlier
// ones for its key; pass it to the store you write so a stale holder's writes
// can be refused.
package lockcore
