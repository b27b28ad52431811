package bench

import (
	"fmt"
	"os"
	"sync"
)

// Servers is what a library needs beside the Target's Redis: servers of
// its own (etcd members, independent Redis masters), started once per
// process by Up and stopped by Down. Where they listen is kept in the
// environment variable Var, so that the worker processes of a run, which
// inherit it, use the same servers rather than start their own.
type Servers struct {
	Var   string
	start func() (where string, stop func(), err error)
}

var (
	serversMu sync.Mutex
	stops     []func()
)

// Up starts s unless Var already names where it is, and returns that.
func (s *Servers) Up() (string, error) {
	serversMu.Lock()
	defer serversMu.Unlock()
	if w := os.Getenv(s.Var); w != "" {
		return w, nil
	}
	where, stop, err := s.start()
	if err != nil {
		return "", fmt.Errorf("%s: %w", s.Var, err)
	}
	if err := os.Setenv(s.Var, where); err != nil {
		stop()
		return "", err
	}
	stops = append(stops, func() { stop(); _ = os.Unsetenv(s.Var) })
	return where, nil
}

// Down stops every server that Up started in this process.
func Down() {
	serversMu.Lock()
	defer serversMu.Unlock()
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
	stops = nil
}
