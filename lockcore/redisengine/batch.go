package redisengine

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxFlights is how many calls or pipelines an Engine has on the wire at
// once before further calls queue.
const maxFlights = 8

// batcher sends an Engine's acquire and release calls, each from a flight:
// a goroutine that sends one call, or the whole queue as one pipeline, and
// then whatever queued meanwhile, until the queue is empty. At most
// maxFlights fly at once; under load Redis then reads and answers many calls
// per system call instead of one each, which is most of its time per call.
//
// The caller waits for its answer only until its deadline, whatever the
// client's own timeouts and retries: go-redis, at its default options, may
// spend seconds on one command (three retries after 3 s read timeouts) and
// ignores the context's deadline. A call the caller stopped waiting for
// still lands, and its late hook runs then (an acquisition is withdrawn).
// When the client applies context deadlines itself, a call alone flies in
// its caller's goroutine, bounded by its deadline, as it would without a
// batcher. Either way the context a call is sent with ends at its deadline
// (see detached), so that go-redis stops redialling and retrying then, and
// a call it gave up on so fails with errExpired: it may have reached Redis.
//
// When a flight fails on the network (a timeout, a dropped connection), the
// calls queued behind it fail with the same error without being sent: Redis
// is not answering, and a queued call must not wait for one failed flight
// and then for its own.
type batcher struct {
	run *runner
	// direct: the client stops a call's I/O at its context's deadline
	// (ContextTimeoutEnabled), so a call that finds a flight free flies in
	// its caller's goroutine, saving a goroutine hop each way.
	direct  bool
	mu      sync.Mutex
	flights int
	queue   []*call
	bg      *tracker // counts the flights
	// idle hands a batch to a flight that finished its last one and waits
	// a while for more (see fly) instead of starting a goroutine for it:
	// a new goroutine's stack grows through the client's calls again each
	// time. quit ends the waits (the Engine's context).
	idle chan []*call
	quit <-chan struct{}
}

// flightIdle is how long a flight that emptied the queue waits for the
// next call before its goroutine ends.
const flightIdle = time.Second

// call states
const (
	callWaiting int32 = iota
	callAnswered
	callAbandoned
)

// call is one script call and what the batcher knows of it.
type call struct {
	cmd      redis.Cmder
	ctx      context.Context // the caller's, for its values
	args     [20]any
	deadline time.Time // how long the caller waits
	sent     time.Time // when the caller asked: the call ran no earlier
	keep     bool      // sent even if the caller stops waiting before
	h        *hold     // the hold the call is for
	member   string    // the attempt's waiter member, for its withdrawal

	// after runs in the flight once the call is answered, before the
	// caller is told; late runs in the flight when the caller stopped
	// waiting. Either may be nil.
	after, late func(*call)

	n     int64 // what after made of the reply
	woke  bool  // after handed the lock to a waiter of this Engine
	state atomic.Int32
	done  chan struct{}
	timer *time.Timer
	alone [1]*call       // the call itself, as a batch of one
	one   [1]redis.Cmder // its command, as a batch of one

	// The end of the context the call is sent with (see detached): expiry
	// closes expired at the deadline; a channel closed so is replaced by a
	// new one, so expired is open whenever the call is not on the wire.
	expired chan struct{}
	expiry  *time.Timer
}

// Calls are recycled: a call, its channels and its timers would be five
// allocations each. A call is recycled by whoever holds it last: its caller
// once answered or taken back unsent, else its flight.
var callPool = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	c := &call{done: make(chan struct{}, 1), timer: t, expired: make(chan struct{})}
	c.expiry = time.AfterFunc(time.Hour, c.expire)
	c.expiry.Stop()
	c.alone[0] = c
	return c
}}

// arm returns a context with parent's values and c's deadline, done at
// the deadline, to send c with (and the calls it leaves with, whose
// deadlines are no later). It arms c's expiry; disarm must follow once the
// trip returns.
func (c *call) arm(parent context.Context) context.Context {
	c.expiry.Reset(time.Until(c.deadline))
	return detached{parent, c.deadline, c.expired}
}

// expire ends the context of c's call: its deadline passed.
func (c *call) expire() { close(c.expired) }

// disarm stops c's expiry and reports whether c's deadline passed. If it
// did, the closed channel is replaced by a new one (once expire has closed
// it: expire reads c.expired), so that the next call's context is not done
// from the start.
func (c *call) disarm() bool {
	if c.expiry.Stop() {
		return false
	}
	<-c.expired
	c.expired = make(chan struct{})
	return true
}

// errExpired: the client gave up on a call when its context ended at the
// call's deadline. The call may have reached Redis.
var errExpired = errors.New("no answer from redis by the call's deadline")

// expired replaces the error of each of cmds that the client gave up on
// when the context of their trip ended at its deadline, the context's
// error, with errExpired: Redis did not answer in time, which is no
// caller's deadline (a gRPC caller would be told DeadlineExceeded) and
// which the batcher treats as Redis not answering. It returns the trip's
// network error, err or else errExpired if it replaced any.
func expired(cmds []redis.Cmder, err error) error {
	for _, cmd := range cmds {
		if errors.Is(cmd.Err(), context.DeadlineExceeded) {
			cmd.SetErr(errExpired)
			if err == nil {
				err = errExpired
			}
		}
	}
	return err
}

func newCall() *call { return callPool.Get().(*call) }

func (c *call) recycle() {
	c.cmd, c.ctx, c.h, c.member, c.after, c.late = nil, nil, nil, "", nil, nil
	c.one[0] = nil
	c.args = [20]any{}
	c.keep, c.woke, c.n = false, false, 0
	c.state.Store(callWaiting)
	callPool.Put(c)
}

// outcomes of batcher.do
const (
	answered  = iota // c holds the answer; the caller owns c
	unsent           // the caller stopped waiting before c was sent; it owns c
	abandoned        // the caller stopped waiting for c on the wire; the flight owns c
)

// do sends c and waits for its answer until c.deadline. When ctx ends
// first, a call not yet sent is taken back (Redis never sees it); one on the
// wire is still waited for, so that its caller knows what it did.
func (b *batcher) do(ctx context.Context, c *call) int {
	b.mu.Lock()
	if b.direct && b.flights < maxFlights {
		b.flights++
		b.bg.add()
		b.mu.Unlock()
		err := b.send(c.alone[:], nil)
		if c.after != nil {
			c.after(c)
		}
		if next := b.land(err); next != nil {
			b.launch(next)
		} else {
			b.bg.done()
		}
		return answered
	}
	b.enqueue(c)
	return b.wait(ctx, c)
}

// doAll sends cs, calls that are sent whatever happens (call.keep), in one
// pipeline or in one with other calls, and waits for each one's answer
// until its deadline; it returns the outcome of each, as do.
func (b *batcher) doAll(cs []*call) []int {
	b.mu.Lock()
	b.enqueue(cs...)
	outs := make([]int, len(cs))
	for i, c := range cs {
		outs[i] = b.wait(context.Background(), c)
	}
	return outs
}

// enqueue queues cs, with b.mu held, which it unlocks, and starts a
// flight for the queue if fewer than maxFlights fly.
func (b *batcher) enqueue(cs ...*call) {
	b.queue = append(b.queue, cs...)
	var batch []*call
	if b.flights < maxFlights {
		b.flights++
		batch, b.queue = b.queue, nil
		b.bg.add()
	}
	b.mu.Unlock()
	if batch != nil {
		b.launch(batch)
	}
}

// launch starts a flight for batch, counted in b.flights and b.bg already:
// a flight that waits for more takes it, else a new goroutine.
func (b *batcher) launch(batch []*call) {
	select {
	case b.idle <- batch:
	default:
		go b.fly(batch)
	}
}

// wait waits for the answer to c, queued, as do says.
func (b *batcher) wait(ctx context.Context, c *call) int {
	c.timer.Reset(time.Until(c.deadline))
	defer c.timer.Stop()
	select {
	case <-c.done:
		return answered
	case <-ctx.Done():
		if b.takeBack(c) {
			return unsent
		}
		select {
		case <-c.done:
			return answered
		case <-c.timer.C:
		}
	case <-c.timer.C:
		if b.takeBack(c) {
			return unsent
		}
	}
	if c.state.CompareAndSwap(callWaiting, callAbandoned) {
		return abandoned
	}
	<-c.done // answered meanwhile
	return answered
}

// takeBack removes c from the queue if it is still there, unless c is to
// be sent whatever happens.
func (b *batcher) takeBack(c *call) bool {
	if c.keep {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if i := slices.Index(b.queue, c); i >= 0 {
		b.queue = slices.Delete(b.queue, i, i+1)
		return true
	}
	return false
}

// fly sends batch, then the queue, until the queue is empty; then it waits
// up to flightIdle for the next flight's batch (see launch).
func (b *batcher) fly(batch []*call) {
	var buf []redis.Cmder // the flight's pipelines' commands, reused
	var idle *time.Timer
	for {
		for len(batch) > 0 {
			err := b.send(batch, &buf)
			for _, c := range batch {
				b.finish(c)
			}
			batch = b.land(err)
		}
		// This flight has landed: it no longer counts until it takes
		// another batch, whose launcher counted it.
		b.bg.done()
		if idle == nil {
			idle = time.NewTimer(flightIdle)
		} else {
			idle.Reset(flightIdle)
		}
		select {
		case batch = <-b.idle:
			idle.Stop()
		case <-idle.C:
			return
		case <-b.quit:
			idle.Stop()
			return
		}
	}
}

// finish tells c's caller, or runs c's late hook when nobody waits.
func (b *batcher) finish(c *call) {
	if c.after != nil {
		c.after(c)
	}
	if c.state.CompareAndSwap(callWaiting, callAnswered) {
		c.done <- struct{}{}
		return
	}
	if c.late != nil {
		c.late(c)
	}
	c.recycle()
}

// land ends a flight's trip that ended with err and returns the queue, which
// the flight takes next; the queue fails with err instead when err says
// Redis is not answering.
func (b *batcher) land(err error) []*call {
	b.mu.Lock()
	batch := b.queue
	b.queue = nil
	if len(batch) > 0 && !unreachable(err) {
		b.mu.Unlock()
		return batch
	}
	b.flights--
	b.mu.Unlock()
	for _, c := range batch {
		c.cmd.SetErr(err)
		b.finish(c)
	}
	return nil
}

// unreachable reports whether err is a failure to reach Redis, rather than
// Redis's answer or the caller's own context.
func unreachable(err error) bool {
	var reply redis.Error
	return err != nil && !errors.As(err, &reply) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// send runs batch, one call alone or several as one pipeline (see
// runner.run). The context of the trip is not cancelled with the callers'
// and ends at the latest deadline of the batch, so that the client gives up
// then, also while it redials or backs off between retries; a lone call's
// carries the values of its caller's context. A pipeline's commands are
// laid out in *buf, which keeps its capacity for the next. It returns the
// network error, if any.
func (b *batcher) send(batch []*call, buf *[]redis.Cmder) error {
	if len(batch) == 1 {
		c := batch[0]
		c.one[0] = c.cmd
		err := b.run.run(c.arm(c.ctx), c.one[:])
		if c.disarm() {
			err = expired(c.one[:], err)
		}
		c.cmd = c.one[0]
		return err
	}
	last := batch[0] // the call with the latest deadline, whose expiry ends the trip's context
	for _, c := range batch[1:] {
		if c.deadline.After(last.deadline) {
			last = c
		}
	}
	cmds := (*buf)[:0]
	for _, c := range batch {
		cmds = append(cmds, c.cmd)
	}
	err := b.run.run(last.arm(context.Background()), cmds)
	if last.disarm() {
		err = expired(cmds, err)
	}
	for i, c := range batch {
		c.cmd = cmds[i]
	}
	clear(cmds) // the calls are recycled: hold on to none of their commands
	*buf = cmds
	return err
}
