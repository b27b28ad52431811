package lockcore

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"
)

// maxFlights is how many calls or pipelines a Locker has on the wire at
// once before further calls queue.
const maxFlights = 8

// batcher sends a Locker's acquire and release calls. A call goes straight
// out while fewer than maxFlights are on the wire; otherwise it queues, and
// when a flight lands the whole queue leaves as one pipeline, sent by the
// goroutine of its first call. Under load Redis then reads and answers many
// calls per system call instead of one each, which is most of its time per
// call; alone, a call costs what it did without the batcher.
//
// When a flight fails on the network (a timeout, a dropped connection), the
// calls queued behind it fail with the same error without being sent: Redis
// is not answering, and a queued call must not wait for one failed flight
// and then for its own.
type batcher struct {
	rdb     redis.UniversalClient
	mu      sync.Mutex
	flights int
	queue   []*call
}

// call is a queued script call.
type call struct {
	s    *script
	cmd  redis.Cmder
	lead []*call // set when this call's goroutine is to send lead
	done chan struct{}
}

// Calls are recycled: under load most calls queue, and a call and its
// channel would be two allocations each. A call is recycled by its own
// goroutine once nobody else refers to it: it left the queue unsent, or its
// done was signalled, after which the sender does not touch it again.
var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

func (c *call) recycle() {
	c.s, c.cmd, c.lead = nil, nil, nil
	callPool.Put(c)
}

// run runs s with args (laid out as script.run wants them) and returns the
// command that answered, or failed.
func (b *batcher) run(ctx context.Context, s *script, args []any) redis.Cmder {
	b.mu.Lock()
	if b.flights < maxFlights {
		b.flights++
		b.mu.Unlock()
		cmd := s.run(ctx, b.rdb, args)
		b.land(cmd.Err())
		return cmd
	}
	c := callPool.Get().(*call)
	c.s, c.cmd = s, s.cmd(ctx, args)
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	defer c.recycle()

	select {
	case <-c.done:
	case <-ctx.Done():
		b.mu.Lock()
		if i := slices.Index(b.queue, c); i >= 0 {
			// Not sent: leave the queue; Redis never sees the call.
			b.queue = slices.Delete(b.queue, i, i+1)
			b.mu.Unlock()
			c.cmd.SetErr(ctx.Err())
			return c.cmd
		}
		b.mu.Unlock()
		<-c.done // on the wire: its answer comes with the others'
	}
	if c.lead != nil {
		b.land(b.send(context.WithoutCancel(ctx), c.lead))
	}
	return c.cmd
}

// land ends a flight that ended with err: the queue, if any, takes the
// flight over, or fails with err when err says Redis is not answering.
func (b *batcher) land(err error) {
	b.mu.Lock()
	batch := b.queue
	b.queue = nil
	if len(batch) == 0 {
		b.flights--
		b.mu.Unlock()
		return
	}
	if !unreachable(err) {
		b.mu.Unlock()
		batch[0].lead = batch
		batch[0].done <- struct{}{}
		return
	}
	b.flights--
	b.mu.Unlock()
	for _, c := range batch {
		c.cmd.SetErr(err)
		c.done <- struct{}{}
	}
}

// unreachable reports whether err is a failure to reach Redis, rather than
// Redis's answer or the caller's own context.
func unreachable(err error) bool {
	var reply redis.Error
	return err != nil && !errors.As(err, &reply) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// send runs batch as one pipeline and wakes its calls but the first, whose
// goroutine is the caller. A call whose script Redis does not know is run
// again on its own, with EVAL. It returns the pipeline's network error.
func (b *batcher) send(ctx context.Context, batch []*call) error {
	p := b.rdb.Pipeline()
	for _, c := range batch {
		_ = p.Process(ctx, c.cmd)
	}
	_, err := p.Exec(ctx)
	for i, c := range batch {
		c.cmd = c.s.known(ctx, b.rdb, c.cmd)
		if i > 0 {
			c.done <- struct{}{}
		}
	}
	if unreachable(err) {
		return err
	}
	return nil
}
