// Package admin serves a small operations page and a JSON API over a
// lockcore.Operator (lock.Locker.Operator returns one): the locks held or
// awaited, their holders and waiters, each named by its instance (the
// engine's name, such as the pod: redisengine.Options.Name), with the route
// or gRPC method it came through and its request's trace id, the fencing
// tokens, and a force-release
// of a hold whose owner is stuck, with a reason kept in the lock's audit
// record; and, when the engine keeps results for idempotency keys
// (lockcore.Results, as the Redis engine does), the stored results and
// the drop of one. Handler returns it as an http.Handler; the routelock command does
// the same from a shell.
//
// # Routes
//
// Relative to where the handler is mounted:
//
//	GET  /                       the HTML page: a table of the locks, and a release form per held lock
//	GET  /locks?prefix=&limit=   List: the locks whose escaped key starts with prefix, in key order
//	GET  /locks/{key}            Lock: the state of one key, free or not, with its audit records
//	POST /locks/{key}/release    force-release with a reason; Revocation
//	GET  /gates                  the closed gates (sold out), when the Operator is a lockcore.Gatekeeper
//	POST /gates/{key}/open       open a gate: every instance serves the resource again; {"opened": key}
//	GET  /results?prefix=&limit= the stored results whose lookup key starts with prefix, when the engine keeps results
//	POST /results/{key}/drop     drop a stored result: the next request with its idempotency key runs again; {"dropped": key}
//
// {key} is the key as lockcore.Key.String prints it (productID:42),
// escaped as a URL path segment (url.PathEscape); a key that reads locks,
// release, gates, open, results, drop, "." or ".." has its first byte
// escaped (%6Cocks).
// The page lists the closed gates above the locks, each with an Open
// button. While the restart guard refuses fresh locks (the Operator is a
// lockcore.RestartGuarder, as the Redis engine is: after a Redis without
// an append-only file starts, for redisengine.Options.MaxTTL), the page
// says so above them: "Redis restarted without its data: no lock is taken
// for 4.2s more (restart guard)". The answers
// are JSON (see below); a browser (Accept: text/html) gets the page for
// GET /locks and GET /locks/{key} too, and for a release posted from the
// page's form. A list shows Config.PageSize locks (100 unless set) when
// the request gives no limit; a limit is 1 to 1000, a prefix at most 4096
// bytes.
//
// # Stored results
//
// An engine that keeps results (lockcore.Results, declared by
// lockcore.Promises.Results: the Redis engine) stores the response of a
// request with an idempotency key (lock.Locker.Idempotent,
// middleware.Idempotency) beside its lock. The page links them ("stored
// results", GET /results for a browser): a table of their lookup keys,
// sizes and expiries, filtered by a prefix and a limit as the locks are,
// each with a Drop button. A lookup key is "idempotency:", the operation
// (the HTTP method and route template, or the gRPC method), the caller
// ("~" for none) and a digest of the client's idempotency key:
// idempotency:POST:/orders:~:3f0c…; neither the client's key nor the
// stored response is ever shown. A drop deletes the result, so that the
// next request with its idempotency key runs again, as if it were the
// first; it is a POST, refused across origins as a release is (see
// Cross-site requests), and Config.Logger logs it (the resource name,
// idempotency, and the remote address). It answers 200 with
// {"dropped": key}, 404 when no result is stored for the key, 400 for an
// invalid key, 403, 405 and 503 as a release does. Over an engine that
// keeps no results, the page shows no stored results, and GET /results and
// a drop answer 501.
//
// The handler serves these routes relative to where it is mounted, and
// answers 404 to every other path (such as /admin/locks/locks/productID:42
// under a handler mounted at /admin). It learns the mount point from chi's
// Mount, from http.StripPrefix (the path it is left with), or from the
// pattern it is registered under as it is: an http.ServeMux subtree
// (/admin/) or a chi wildcard (/admin/*). Its page links relative URLs, so
// it works behind a proxy that strips a prefix too. Mounted elsewhere (another router that passes the
// whole path on), strip the prefix with http.StripPrefix. A mount point
// ending in /locks (/debug/locks) works too, with the page at
// /debug/locks/ and the list at /debug/locks/locks.
//
// A release answers 200 with the Revocation, 404 when nobody holds the
// lock (lockcore.ErrNotHeld), 400 for a missing reason, a reason refused
// with lockcore.ErrInvalidReason (longer than 256 bytes, not UTF-8, or
// with control characters) or an invalid key, 415 for a body
// that is neither JSON nor a form, 403 for a cross-origin browser post,
// 405 for another method, and 503 when the lock service is unavailable
// (lockcore.ErrUnavailable). The reason comes from a JSON body
// {"reason": "..."} or the form field reason, trimmed of surrounding
// space:
//
//	curl -u ops -H 'Content-Type: application/json' -d '{"reason":"stuck since the 14:02 deploy"}' \
//		https://app.example.com/admin/locks/productID:42/release
//
// What the handler shows never contains an owner token: an Operator names
// owners by a digest. Error responses never carry the backend's own
// errors; Config.Logger logs them.
//
// # JSON
//
// Every JSON answer is one object, indented by two spaces, with the fields
// in the order below, Content-Type application/json; charset=utf-8 and
// Cache-Control no-store. Lists are never null ([] when empty). Times are
// strings in RFC 3339 in UTC, with as many fractional digits as needed
// (2026-11-23T14:02:03.456789Z), and the field is left out when the
// backend does not know the time.
// Durations are whole milliseconds. The routelock command prints the same
// objects with -json.
//
// GET /locks answers a list:
//
//	locks             array of lock objects, in key order
//	more              bool: the limit left some locks out
//	restart_guard_ms  number: how long the restart guard still refuses fresh locks, in
//	                  milliseconds; left out when it does not (or the Operator keeps none)
//
// GET /locks/{key} answers a lock object, and a list holds them:
//
//	key         string: the escaped key (productID:42), as lockcore.Key.String prints it
//	held        bool: someone holds the lock
//	holders     array of holder objects: one for a lock held exclusively, one
//	            per owner for a shared one (readers, permits), none for a free one
//	fence       number: the current hold's fencing token, 0 when free
//	last_fence  number: the key's last fencing token, 0 if none is remembered
//	ttl_ms      number: the hold's remaining lease in milliseconds, 0 when free
//	waiters     array of waiter objects: the queued acquisitions, first in line first
//	audit       array of revocation objects: the latest force-releases of the key, newest first
//	restart_guard_ms  number: as in a list, in the answer of GET /locks/{key} only;
//	                  left out in a list's lock objects and when the guard does not refuse
//
// A free key is a lock object with held false, not an error. A holder:
//
//	owner       string: the digest of the owner's token, never the token
//	count       number: how many acquisitions hold it (lockcore.Holder.Count)
//	instances   array of strings: the engine ids of the processes holding it
//	names       array of strings: their instance names, in the same order ("" where
//	            unknown): redisengine.Options.Name, by default <hostname>-<pid>
//	route       string: the route template (/products/{productID}/buy) or gRPC method
//	            that took the hold; left out when not known
//	trace       string: the trace id of the request that took it (lock.Trace); left out
//	            when none. The Redis engine shows route and trace once a hold or
//	            waiter has lasted a third of its engine's TTL (at most a second),
//	            checked that often: it shows within twice that
//	since       time: when the hold was taken
//	mode        string: exclusive, shared (a reader, lock.Shared) or permit (lock.Permits)
//	permits     number: a permit's n; left out otherwise
//	slot        number: a permit's slot, 0..n-1; left out otherwise
//	fence       number: the hold's fencing token (the lock's fence is the newest one's)
//
// A waiter:
//
//	instance    string: the engine id of the waiting process
//	name        string: its instance name; left out when not known
//	route       string: the route template or gRPC method that waits; left out when not known
//	trace       string: the trace id of the waiting request; left out when none
//	since       time: when it queued
//	deadline    time: when it gives up
//	mode        string: exclusive, shared or permit, as a holder's
//	permits     number: a permit's n; left out otherwise
//
// POST /locks/{key}/release answers a revocation, and a lock's audit holds
// them:
//
//	key         string: the escaped key
//	owner       string: the digest of the revoked owner's token
//	fence       number: the revoked hold's fencing token
//	new_fence   number: the key's last fencing token afterwards, greater than fence
//	reason      string: the operator's reason, as kept in the audit record
//	at          time: when, by the backend's clock
//
// GET /gates answers {"gates": [...]}, in key order, each
//
//	key         string: the escaped key
//	since       time: when the gate was closed
//	until       time: when it opens by itself; left out for a gate closed until opened
//
// GET /results answers {"results": [...], "more": bool}, in key order,
// more saying that the limit left some out, each
//
//	key         string: the escaped lookup key, as stored
//	size        number: the bytes stored for it
//	expires     time: when the backend drops it by itself
//
// Every error answer, whatever its status, is
//
//	error       string: what is wrong, such as "lock not held"
//
// # Protecting it
//
// The handler authenticates nobody. Whoever reaches it can read lock keys,
// which are request data (product, order or user ids), force-release any
// lock, and drop any stored result, after which a retried payment runs
// again. Mount it behind the application's own authentication and
// authorization, as in the Example: a chi group whose middleware checks
// the operator's credentials.
//
// # Cross-site requests
//
// A force-release, like the opening of a gate and the drop of a stored
// result, changes state, so it is a POST, and the handler refuses a
// browser's cross-origin POST with 403 (http.CrossOriginProtection: the
// browser's Sec-Fetch-Site header, or else an Origin whose host is not the
// request's). A page on another site therefore cannot make an operator's
// browser submit the release form, even though the browser would attach
// the operator's Basic-auth credentials or cookies. Requests without those
// headers, from curl or a script, pass: they carry no ambient credentials
// of a browser. This needs no CSRF token, so the page stays stateless and
// works behind any authentication middleware, and no custom header or
// JSON-only rule, so the form works without script. A page served through
// a proxy that rewrites the Host header names its public origin in
// Config.TrustedOrigins. The page itself runs no script, and forbids framing and
// form posts elsewhere in its Content-Security-Policy.
package admin
