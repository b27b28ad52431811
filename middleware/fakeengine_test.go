package middleware_test

import "github.com/routelock/lock/internal/enginetest"

// The in-memory engine with what these tests do to it (enginetest.Fake).
type (
	fakeEngine = enginetest.Fake
	call       = enginetest.Call
)

var newFake = enginetest.New
