package interceptor_test

import (
	"testing"

	"github.com/routelock/lock/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }
