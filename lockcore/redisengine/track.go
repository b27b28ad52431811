package redisengine

import (
	"sync"
	"time"
)

// tracker counts an Engine's background work (flights, withdrawals,
// renewals) so that Close can wait for it. Unlike a sync.WaitGroup, work
// may start while Close waits: a withdrawal can start one more flight.
type tracker struct {
	mu   sync.Mutex
	n    int
	idle []chan struct{} // closed when n drops to 0
}

func (t *tracker) add() {
	t.mu.Lock()
	t.n++
	t.mu.Unlock()
}

func (t *tracker) done() {
	t.mu.Lock()
	t.n--
	var idle []chan struct{}
	if t.n == 0 {
		idle, t.idle = t.idle, nil
	}
	t.mu.Unlock()
	for _, c := range idle {
		close(c)
	}
}

// wait waits until no work is left, at most until deadline; it reports
// whether none was.
func (t *tracker) wait(deadline time.Time) bool {
	t.mu.Lock()
	if t.n == 0 {
		t.mu.Unlock()
		return true
	}
	c := make(chan struct{})
	t.idle = append(t.idle, c)
	t.mu.Unlock()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-c:
		return true
	case <-timer.C:
		return false
	}
}

// do runs f in a goroutine of its own, tracked.
func (t *tracker) do(f func()) {
	t.add()
	go func() {
		defer t.done()
		f()
	}()
}
