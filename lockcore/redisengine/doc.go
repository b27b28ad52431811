// Package redisengine is routelock's Redis engine: reentrant, fenced,
// watchdog-renewed locks on one Redis (a server, or a Cluster), with
// fail-fast and blocking acquisition. It is a lockcore.Engine, which
// takes holds and gives them back; lock.New makes one, and the Locker it
// is given to owns the leases of its holds:
//
//	engine, err := redisengine.New(rdb, redisengine.Options{})
//	locker := lock.FromEngine(engine)
//	lease, err := locker.Acquire(ctx, key, lock.Wait(2*time.Second))
//
// # Owners and reentrancy
//
// A lock is held by an owner token, 128 random bits minted for the hold when
// the lock is taken (lockcore.Request.Token), which the lease's
// context.Context carries. An acquisition whose request carries the token
// of the hold (lockcore.Request.Join) re-enters the lock: its attempt id
// is added to the hold's entries in Redis, so the nested caller may be
// another process that received the token. Each release drops its own
// entry; the key is freed when none is left. A token never takes a free
// lock, so one that holds nothing grants nothing.
//
// # Data layout
//
// A lock on key K with prefix P uses up to five Redis keys that share the
// hash tag {K}, so each script touches one Redis Cluster slot:
//
//	P{K}     string  the hold: owner token, fencing token, when it was
//	                 taken (the server's clock), a waiters flag, and its
//	                 entries (the attempt ids holding it)
//	P{K}:q   zset    waiters in arrival order
//	P{K}:f   string  the last fencing token (kept Options.FenceRetention),
//	                 and " q" after it while waiters may be queued
//	P{K}:r   string  the entries of revoked holds, as long as those holds
//	                 would have lived
//	P{K}:a   stream  audit records of revocations (the latest 100 or so,
//	                 for Options.AuditRetention)
//	P{K}:o:<id>      what a Revoke call did, for an hour, so that the call
//	                 re-sent after a lost reply does nothing more
//
// and, on one server (not a Cluster), two keys of the server's, whatever
// the prefix:
//
//	routelock:restart-guard      set for Options.MaxTTL after a server
//	                             without an append-only file starts (see
//	                             "What Redis must promise")
//	routelock:restart-guard:run  the run of the server it was decided for
//
// and on a Cluster, instead, one key per slot, whatever the prefix:
//
//	routelock:restart-guard:{T}  the restart guard of the slot of hash
//	                             tag T, set in every slot of a master
//	                             that started without an append-only file
//
// The hold's format is defined, and read, in lua/hold.lua, which every
// script starts with, and in parseHold on the Go side. Acquire and release
// are one EVALSHA each; each script is sent whole, with a "#!lua" shebang
// (Redis 7 then checks that it touches only the keys it declares), or
// without it for a server that does not read one. The hold is a string because
// that is what Redis sets and deletes fastest: an uncontended acquire is
// a TIME, a GET and a SET of the last fencing token and one SET NX of the
// hold, a release one GET and one DEL. Shared locks and permits (several holders) will keep a hash of
// holders under the same name, which an exclusive acquire meets as a
// WRONGTYPE reply; the queue leaves room for FIFO-fair waiting and for
// multi-key locks.
//
// # Calls that run twice, and calls that do not come back
//
// Clients re-send a command whose reply was lost (go-redis does, at its
// default options, after a reset connection or a read timeout), so Redis
// may run a script twice. Every call names its attempt and finds its own
// entry if it ran before: a re-sent acquire returns the same fencing token,
// a re-sent re-entry or release changes nothing more, and a release after
// the lease was lost touches no later hold of the same token.
//
// The engine does not rely on the client's timeouts: unless the client
// applies context deadlines itself (ContextTimeoutEnabled), each call flies
// in a goroutine other than its caller's (one that, having emptied the
// queue, waits a second for the next call before it ends), and its caller
// waits only until its deadline
// (Options.Timeout or the context's deadline for an acquisition,
// Options.ReleaseTimeout for a release). An acquisition that was not
// answered fails with ErrUnavailable and is withdrawn when its call lands.
// An acquisition whose call may have reached Redis is withdrawn whatever
// the client's last error was (a client that retries reports the last
// try's, and an earlier try may have run). A release or withdrawal that
// Redis does not answer is sent again in the background until it is
// answered or its entry can hold nothing any more.
//
// # What Redis must promise
//
// A lock is only as good as Redis's memory of it. A server that evicts keys
// when full (a maxmemory-policy other than noeviction, with a maxmemory
// set: the default of the big managed services) may delete a held lock:
// Check fails with ErrMisconfigured there, and Acquire refuses with it
// (the Engine reads the setting beside its first Acquire, which gives its
// lock back on such a server, and every 30 seconds after).
//
// A server that restarts without its data (no persistence, or RDB
// snapshots older than the holds) forgets the holds whose holders still
// run. Every such restart also empties the server's script cache, so the
// first call of any Engine afterwards, whatever its prefix, is answered
// NOSCRIPT; before loading the script again, that Engine decides the
// restart guard, once per run of the server: when the server started less
// than Options.MaxTTL ago and keeps no append-only file, the guard lives
// until the server is that old, and meanwhile the acquire scripts take no
// fresh hold, of any Engine: the holds the server lost may have been any
// Engine's, of any route, and it cannot tell how long they were, so the
// guard lasts the bound every lease is kept within (MaxTTL, which every
// Engine on the server must share; an acquisition with a longer TTL fails
// with lockcore.ErrMisconfigured). A holder from before the restart has
// lost its lease (its context is cancelled) by then, so no second holder
// gets in beside it. Meanwhile an acquisition fails with a
// *lockcore.RestartGuardError (lockcore.ErrRestartGuard, which matches
// lockcore.ErrUnavailable), with the guard's time left; one that may wait
// longer than that waits it out. The Logger says so once per guard, and
// RestartGuard tells an operator. A server with an append-only file
// reloads its holds and gets no guard. On a Cluster, each master is such a
// server for the slots it serves: the first call that meets its NOSCRIPT,
// in any of them, decides the guard in every one (see lua/guardslots.lua),
// since a master restarted without its data and without a replica taking
// over lost the holds of all of them; the other masters keep granting.
//
// # Waiting
//
// A blocked acquisition queues itself in Redis in the same call that found the
// lock taken. A release that frees the lock hands it to the oldest waiter in
// Redis, in the release script, and publishes the hand-over on the waiter
// Engine's notification channel. Each Engine has one subscription
// connection for all of its waiters, and the woken waiter already holds the
// lock: no further round trip, and no herd of retries. When the waiter
// belongs to the releasing Engine, nothing is published: the release's reply
// names it and the releasing goroutine wakes it.
//
// A waiter in another process holds its grant only for part of
// Options.ClaimWindow until it claims it (by a renewal, or by asking),
// so that one that vanished does not keep the lock; on a single Redis server
// a waiter whose Engine has no subscription any more is skipped at once,
// and parked behind the others: when it asks again (its subscription came
// back), it takes its place back, passed over only for the hand-over it
// could not hear of; one still unheard at its next turn is dropped.
// Because pub/sub can lose messages, a waiter also asks Redis again every
// 3/10 of the claim window, when the holder's lease would have run out, and
// whenever the subscription is re-established; when a release's reply is
// lost, the Engine's waiters on that key ask at once.
//
// # Watchdog and fencing
//
// One goroutine per Engine keeps the leases: it sends renewals, batched in
// pipelines at about TTL/4 to TTL/3, from goroutines it does not wait for,
// and does no I/O itself. A lease is valid on the local monotonic clock
// from the moment the call that confirmed it was sent, for the length
// Redis granted less a tenth; the watchdog cancels its context with cause
// ErrLockLost the moment that runs out, however long a renewal is blocked
// in the client, and at once when a renewal finds the lease gone or owned
// by someone else. Every fresh hold gets a fencing token greater than all
// earlier ones for its key; pass it to the store you write so a stale
// holder's writes can be refused.
//
// # Operations
//
// The Engine is a lockcore.Operator. Inspect and List show locks (owners by
// a digest of their token, never by token; waiters by Engine id and deadline; the audit
// of revocations); List scans with SCAN, on every master of a Cluster.
// Revoke force-releases a hold in one script: it deletes the hold,
// remembers its entries so that the holders' renewals and releases answer
// "revoked", draws a fencing token past the hold's fence, grants the
// next waiter, records an audit entry, and tells the holding Engines on
// their notification channels, which renew at once and cancel the lease
// contexts with cause lockcore.ErrRevoked.
//
// # Logging
//
// With Options.Logger set, an outage is one warning, "Redis unreachable",
// at the first call of the Engine's that fails, whichever it is (an
// acquisition, a renewal, a release, the notification subscription, the
// periodic read of the gates), and one info line, "Redis answers again",
// at the next that succeeds: a restart of Redis is logged even while no
// lock is taken, as its subscription drops. go-redis logs on its own,
// through the standard log package to stderr, not through Options.Logger:
// while Redis is down each dial that fails prints a line such as "redis:
// connection pool: failed to dial after 5 attempts: dial tcp ...:
// connection refused", many a second under load. Quiet them with
// redis.SetLogger(&logging.VoidLogger{}) (package
// github.com/redis/go-redis/v9/logging), or route them to slog by giving
// redis.SetLogger a type whose Printf(ctx, format, args...) calls, say,
// slog.DebugContext(ctx, fmt.Sprintf(format, args...)); either holds for
// every client of the process.
//
// # Events
//
// Options.Events, when set, hears of waits, wake-ups and renewals (see
// Options.Events); the ends of holds are the Locker's to tell (lock.New
// gives it the same Events). Left nil, it costs one nil check where it
// would be called.
package redisengine
