// Package quorumengine is a routelock engine on N independent Redis
// masters (Redlock, done with fencing and a restart guard): a hold is a
// hold on a majority of them, so that one master lost, killed, restarted
// or cut off neither stops the locks nor lets a second holder in. Give it
// to lock.FromEngine, which owns the leases of its holds; every route,
// method, policy, status code, owner-token hop and fencing token stays as
// it is.
//
//	e, err := quorumengine.New([]redis.UniversalClient{rdbA, rdbB, rdbC}, quorumengine.Options{})
//	locker := lock.FromEngine(e)
//
// # How it holds a lock
//
// An acquisition sends one script to every master at once, with one owner
// token: where the lock is free (and the master's restart guard does not
// refuse), it is set for the TTL; where the token's holder is one the
// request may re-enter (a propagated owner token), the request enters
// it. With a quorum (N/2+1) of grants, the hold is confirmed with its
// fencing token on every master, and it is the request's once a quorum has
// confirmed it, valid until the time the acquisition was sent plus the
// TTL, less the clock drift (Options.Drift times the TTL, plus 2ms) and
// a tenth of the TTL as the margin in which a loss is told. An attempt
// without a quorum gives up what it took, on every master, those that did
// not answer in time included, and marks itself given up there, so that
// a grant of it that lands late takes nothing; a release does the same.
//
// The confirmation goes on in the background on the masters that lagged
// (did not answer, or answered late), until the lease's validity ends; the
// renewals, every third of the TTL, confirm the hold the same way on every
// master, and take it where it is free, so that a master lost meanwhile
// does not leave the hold on a bare majority, where a second master lost
// would let another client win one. A renewal is measured from when it
// was sent, on the monotonic clock; a hold that no quorum confirms before
// its validity ends is lost: its Done closes and its Err matches
// lockcore.ErrLockLost (and lockcore.ErrUnavailable), told by a timer, with
// no I/O, before any other client could win a quorum.
//
// A waiting acquisition polls, with jitter, within its Wait (FailFast: one
// attempt): no queue on the masters, no FIFO order, no notifications. The
// waiters of one key in one process line up, and only the first polls,
// so that a crowd neither loads the masters nor splits their votes. A
// wait that ends leaves nothing held. Within a wait, an attempt that
// failed for want of timely answers, or for restart guards, is tried
// again; masters that refuse (down) fail it at once.
//
// # Fencing tokens
//
// Each master keeps a counter per key. A fresh grant increments it (or,
// where it is missing, never written, expired or lost in a restart,
// seeds it with the master's clock in microseconds), and the hold's
// fencing token is the greatest of its quorum's; the confirmation raises
// the counter of every master that confirms to that token, and a quorum
// must confirm it before the hold is the request's. The next hold's
// quorum shares a master with that quorum, whose counter is then at least
// the token, so its token is greater (Promises.OrderedFences). A
// revocation raises the counters of a quorum past the revoked hold's
// token (Revocation.NewFence).
//
// What breaks it: a master that lost its counter (a restart without its
// data) and that alone joins the earlier quorum to the next. Its counter
// is seeded again from its clock when it grants again, which the restart
// guard holds back for Options.MaxTTL, so the token stays greater as long
// as that master's clock is not behind the clock of the master that set
// the earlier token by more than that. A master's clock stepped back by
// more than that, with its data lost, may issue a smaller token.
//
// # What the masters must promise
//
// An odd number of masters (3 or 5), independent (no replication between
// them: a replica promoted after a failover may lack a hold), each a
// single server, reached by loopback or a trusted network. A master that
// restarts without its data forgets the holds whose holders still run:
// each master keeps a restart guard, as lockcore/redisengine does. The
// first script call that a master answers NOSCRIPT (a restart empties the
// script cache) decides it, once per run of the server: when it started
// less than Options.MaxTTL ago without an append-only file, it grants no
// fresh hold until it is that old; it still confirms the holds it is
// asked to, whose holders won their quorum elsewhere. A master that
// refuses does not count toward a quorum. Run the masters with
// appendonly yes and appendfsync always (or everysec, accepting a second
// of lost grants), or without persistence and with the guard, which is
// Redlock's delayed restart, done by the master itself; RDB snapshots
// alone may bring back holds that ended, and lose newer ones.
// An evicting maxmemory-policy may drop a hold: use noeviction.
//
// Safety rests on time: on the masters expiring keys no sooner than their
// TTL says (clock drift within Options.Drift) and on the engine's
// process not pausing longer than its margin. As Kleppmann's critique of
// Redlock says, a process paused past its lease (a GC, a swapped page)
// may act on a lock it lost; the fencing token, checked by the store the
// holder writes to, is what stops it.
//
// # Errors and what it promises
//
// Fewer than a quorum of masters answering is lockcore.ErrUnavailable
// (503 through the HTTP middleware: fail closed); a quorum refused by
// restart guards, a *lockcore.RestartGuardError; a lock held by another
// owner, or votes split among several, a *lockcore.ContentionError.
//
// Promised (lockcore.Promises): OrderedFences, TokenReentry. Not
// promised: FIFO, shared holds, permits, batching; it is no
// lockcore.Gatekeeper. It is a lockcore.Operator: a lock is listed and
// inspected as held when a majority of the masters hold it for one
// owner, and Revoke removes it from every master that answers, with an
// audit record on each.
//
// # Keys
//
// On each master, for a lock with key K and the Prefix P:
//
//	P{K}:l       hash    the hold: owner token, fence, re-entries, labels
//	P{K}:f       string  the key's fencing counter (kept a day)
//	P{K}:a       list    audit records of revocations (the latest 100)
//	P{K}:v:<F>   string  the revocation of the hold with fence F (an hour)
//	P{K}:w:<A>   string  attempt A (owner token and number) given up (the TTL)
//
// and, whatever the prefix, the master's restart guard:
// routelock:quorum:restart-guard and routelock:quorum:restart-guard:run.
package quorumengine
