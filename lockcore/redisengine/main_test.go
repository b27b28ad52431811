package redisengine

import (
	"flag"
	"os"
	"testing"

	"github.com/routelock/lock/internal/redistest"
)

func TestMain(m *testing.M) {
	if os.Getenv("ROUTELOCK_CHILD") != "" {
		os.Exit(childMain()) // a process of TestCrashedHolder or TestPausedHolder
	}
	// The parallel tests spend their time waiting on leases, claim windows
	// and outages, not on the CPU: four run at once unless -test.parallel
	// says otherwise (its default is GOMAXPROCS, 2 on the CI machine).
	flag.Parse()
	if !flagSet("test.parallel") {
		_ = flag.Set("test.parallel", "4")
	}
	redistest.Main(m)
}

// flagSet says whether the test flag name was set on the command line.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
