package lockcore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Options configures a Locker. The zero value of every field means its
// default.
type Options struct {
	// Prefix starts every Redis key and channel the Locker uses. It must not
	// contain '{' or '}'. Default: "routelock:".
	Prefix string

	// TTL is the lease length when a Policy gives none. The watchdog renews
	// a held lease about every TTL/3; a holder cut off from Redis learns the
	// lease is lost after about 0.9×TTL. Minimum 30ms. Default: 10s.
	TTL time.Duration

	// FenceRetention is how long a key's fencing counter lives once seeded.
	// The counter is seeded with the Redis server's clock (microseconds
	// since the epoch) and then counts up by one per acquisition attempt, so
	// order survives its expiry as long as that clock does not step back by
	// more than this. Default: 1h.
	FenceRetention time.Duration

	// ReleaseTimeout bounds a release and the withdrawal of a waiter that
	// gave up. Both run detached from the caller's cancellation, so that a
	// request cancelled after it acquired still releases. Default: 2s.
	ReleaseTimeout time.Duration
}

// MinTTL is the shortest lease a Locker or Policy accepts.
const MinTTL = 30 * time.Millisecond

const (
	defaultPrefix         = "routelock:"
	defaultTTL            = 10 * time.Second
	defaultFenceRetention = time.Hour
	defaultReleaseTimeout = 2 * time.Second
)

func (o Options) withDefaults() (Options, error) {
	if o.Prefix == "" {
		o.Prefix = defaultPrefix
	}
	if strings.ContainsAny(o.Prefix, "{} ") {
		return o, fmt.Errorf("lockcore: Prefix %q must not contain '{', '}' or spaces", o.Prefix)
	}
	if o.TTL == 0 {
		o.TTL = defaultTTL
	}
	if o.TTL < MinTTL {
		return o, fmt.Errorf("lockcore: TTL %v is below the minimum %v", o.TTL, MinTTL)
	}
	if o.FenceRetention == 0 {
		o.FenceRetention = defaultFenceRetention
	}
	if o.FenceRetention < 0 {
		return o, fmt.Errorf("lockcore: negative FenceRetention %v", o.FenceRetention)
	}
	if o.ReleaseTimeout == 0 {
		o.ReleaseTimeout = defaultReleaseTimeout
	}
	if o.ReleaseTimeout < 0 {
		return o, fmt.Errorf("lockcore: negative ReleaseTimeout %v", o.ReleaseTimeout)
	}
	return o, nil
}

// Locker takes and holds locks in one Redis. It is safe for concurrent use.
// A Locker owns two background goroutines, the watchdog that renews held
// leases and the receiver of release notifications on one subscription
// connection; Close stops both.
type Locker struct {
	rdb redis.UniversalClient
	opt Options

	id      string // random; names this Locker's notification channel
	channel string
	seq     atomic.Uint64 // attempt ids

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	closed atomic.Bool
	once   sync.Once

	wd    watchdog
	nf    notifier
	batch batcher        // acquire and release calls
	bg    sync.WaitGroup // withdrawals of failed attempts, each bounded by ReleaseTimeout

	// Script arguments boxed once: the default TTL and the fence retention
	// in ms, and the channel.
	ttlBoxed, retArg, chanArg any
}

// New returns a Locker on rdb. The Locker does not own rdb: Close leaves it
// open. It returns an error when opt is invalid.
func New(rdb redis.UniversalClient, opt Options) (*Locker, error) {
	if rdb == nil {
		return nil, fmt.Errorf("lockcore: nil redis client")
	}
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	l := &Locker{rdb: rdb, opt: opt, id: hex.EncodeToString(b[:])}
	l.channel = opt.Prefix + "notify:" + l.id
	l.batch.rdb = rdb
	l.ttlBoxed, l.retArg, l.chanArg = ms(opt.TTL), ms(opt.FenceRetention), l.channel
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wd.start(l)
	l.nf.start(l)
	return l, nil
}

// Options returns the Locker's options with defaults filled in.
func (l *Locker) Options() Options { return l.opt }

// Close stops the watchdog and the notification receiver. Leases still held
// are no longer renewed: their contexts are cancelled with ErrLockLost (and
// ErrClosed), and their keys expire in Redis at the end of their TTL unless
// released. Waiting acquisitions fail with ErrClosed. Close waits for the
// withdrawal of attempts that failed on a Redis error, each bounded by
// ReleaseTimeout. Close is idempotent.
func (l *Locker) Close() error {
	l.once.Do(func() {
		l.closed.Store(true)
		l.cancel()
		l.nf.stop()
		l.wd.stop()
		l.bg.Wait()
	})
	return nil
}

// redisKeys returns the lock's hold, queue and fence keys. They share the
// hash tag {key}, and one allocation.
func (l *Locker) redisKeys(k Key) (ks [3]string) {
	var b strings.Builder
	n := len(l.opt.Prefix) + len(k.s) + 2
	b.Grow(2*n + 4)
	b.WriteString(l.opt.Prefix)
	b.WriteByte('{')
	b.WriteString(k.s)
	b.WriteString("}:q")
	b.WriteString(l.opt.Prefix)
	b.WriteByte('{')
	b.WriteString(k.s)
	b.WriteString("}:f")
	s := b.String()
	return [3]string{s[:n], s[:n+2], s[n+2:]}
}

// ttlArg returns ms(ttl) as a script argument.
func (l *Locker) ttlArg(ttl time.Duration) any {
	if ttl == l.opt.TTL {
		return l.ttlBoxed
	}
	return ms(ttl)
}

// detached is a context with the values of its parent and a deadline, but
// never cancelled: a release or withdrawal runs to its end, bounded by the
// deadline (as far as the client applies context deadlines) and by the
// client's own timeouts, even when the request that asked for it is gone.
type detached struct {
	context.Context
	deadline time.Time
}

func (d detached) Deadline() (time.Time, bool) { return d.deadline, true }
func (d detached) Done() <-chan struct{}       { return nil }
func (d detached) Err() error                  { return nil }

// detach returns ctx without its cancellation and with the deadline
// ReleaseTimeout from now. It is what context.WithTimeout(
// context.WithoutCancel(ctx)) gives, without the timer and four allocations.
func (l *Locker) detach(ctx context.Context) context.Context {
	return detached{ctx, time.Now().Add(l.opt.ReleaseTimeout)}
}

// nextID returns a fresh attempt id, unique across Lockers.
func (l *Locker) nextID() string {
	return l.id + "." + strconv.FormatUint(l.seq.Add(1), 36)
}

func ms(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
