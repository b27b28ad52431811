package interceptor_test

import "github.com/routelock/lock/internal/enginetest"

// The in-memory engine with what these tests do to it (enginetest.Fake).
type call = enginetest.Call

var newFake = enginetest.New
