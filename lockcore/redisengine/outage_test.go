package redisengine

// Faults that heal: a call that ran but whose reply was lost, followed by
// refused connections (Redis or its host restarting), and callers that
// leave while Redis cannot be reached. What must hold once Redis answers
// again: nothing is held by an attempt whose caller was told it failed, and
// a waiter that returned is never handed the lock for longer than the claim
// window. Clients at go-redis's defaults and with ContextTimeoutEnabled.

import (
	"github.com/redis/go-redis/v9"
)

// ctxKind is go-redis at its defaults with ContextTimeoutEnabled, as the
// README's quick start builds it.
var ctxKind = clientKind{"ctx", func(addr string) *redis.Options {
	return &redis.Options{Addr: addr, ContextTimeoutEnabled: true}
}}

// healKinds are the client configurations the healing-fault tests run with.
var healKinds = []clientKind{defaultKind, ctxKind}
