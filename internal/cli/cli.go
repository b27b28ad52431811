// Package cli is the routelock command, for the main packages that build
// it with the engines they link: cmd/routelock, on Redis, and
// etcdengine/cmd/routelock, on Redis or etcd. See cmd/routelock for its
// usage.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/routelock/lock/internal/operate"
	"github.com/routelock/lock/internal/redisconf"
	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/quorumengine"
	"github.com/routelock/lock/lockcore/redisengine"
)

// Opener opens the Operator of the engine that env names, with the key
// prefix prefix ("" for the engine's default). It returns the Operator,
// where it is for messages ("Redis at localhost:6379", never a
// password), and a function that closes both.
type Opener func(env func(string) string, prefix string) (op lockcore.Operator, where string, close func(), err error)

// Main runs the command with the program's arguments and environment,
// opening its engine with open, and exits with its status.
func Main(open Opener) {
	redis.SetLogger(quiet{}) // the errors say what went wrong, once
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr, open)
	stop()
	os.Exit(code)
}

// quiet is a go-redis logger that logs nothing.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// Exit codes.
const (
	exitOK      = 0
	exitError   = 1
	exitUsage   = 2
	exitNotHeld = 3
)

const (
	defaultPrefix = "routelock:" // redisengine's default Prefix
	defaultLimit  = 1000
)

const usage = `usage: routelock [flags] ls [PREFIX]
       routelock [flags] inspect KEY
       routelock [flags] release KEY -reason TEXT
       routelock [flags] gates
       routelock [flags] open KEY
       routelock [flags] results [PREFIX]
       routelock [flags] drop KEY

Lists, inspects and force-releases routelock's locks, lists and opens
the closed gates of sold-out resources, and lists and drops the results
stored for idempotency keys, in the Redis that
REDIS_URL (one server: redis://[user:password@]host:6379/0),
REDIS_CLUSTER_URL (a Cluster: redis://node1:6379?addr=node2:6379) or
REDIS_SENTINEL_URL (Sentinel: redis://sentinel1:26379?master_name=mymaster)
names; localhost:6379 when none is set; or, for the command built with the
etcd engine (github.com/routelock/lock/etcdengine/cmd/routelock), the etcd
that ETCD_ENDPOINTS (http://etcd1:2379,http://etcd2:2379) names, which has
no gates. KEY is a key as ls prints it, such as
productID:42; quote a segment's, which has a space: 'productID:42 #3'.

results lists the stored results by lookup key (idempotency:, the
operation, the caller or ~, and a digest of the client's key: never the
key or the response), size and expiry; drop KEY drops one, and the next
request with its idempotency key runs again.

Flags may come before or after the command. Holders and waiters are named
by their instance, "pod-a (033a2e7db54e2a2f)": the engine's name and id;
inspect shows the route and trace id of each when known. While the restart
guard refuses fresh locks (Redis restarted without its data), ls and inspect
say so in a line before their output (-json: restart_guard_ms).

Exit status: 0 done, 1 error, 2 usage, 3 release of a lock nobody holds
or drop of a result not stored.

Flags:
`

// options are the command line's flags.
type options struct {
	json    bool
	prefix  string
	timeout time.Duration
	limit   int
	reason  string
}

// flags returns the flag set of cmd ("" before the command), bound to o.
func flags(cmd string, o *options, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("routelock", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.BoolVar(&o.json, "json", o.json, "print JSON instead of a table")
	fs.StringVar(&o.prefix, "prefix", o.prefix, "the engine's key `prefix` (default: routelock: on Redis, routelock/ on etcd)")
	fs.DurationVar(&o.timeout, "timeout", o.timeout, "give up after this `duration`")
	if cmd == "" || cmd == "ls" || cmd == "results" {
		fs.IntVar(&o.limit, "limit", o.limit, "ls, results: show at most `n` locks or results (0: all)")
	}
	if cmd == "" || cmd == "release" {
		fs.StringVar(&o.reason, "reason", o.reason, "release: why, kept in the audit record (required)")
	}
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

// parse parses args with fs, flags and operands mixed, and returns the
// operands. Everything after "--" is an operand.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var operands []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return operands, nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(operands, rest...), nil
		}
		operands = append(operands, rest[0])
		args = rest[1:]
	}
}

// Run is the command: args without the program's name, env for the
// environment, open for its engine. It returns the exit status.
func Run(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer, open Opener) int {
	o := options{timeout: 10 * time.Second, limit: defaultLimit}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "routelock: "+format+"\n", a...)
		fmt.Fprintln(stderr, "run routelock -h for help")
		return exitUsage
	}

	// Flags before the command, then the command's own and its operands.
	global := flags("", &o, stderr)
	if err := global.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			global.Usage()
			return exitOK
		}
		return usageErr("%v", err)
	}
	rest := global.Args()
	if len(rest) == 0 {
		return usageErr("no command: want ls, inspect, release, gates, open, results or drop")
	}
	cmd := rest[0]
	switch cmd {
	case "ls", "inspect", "release", "gates", "open", "results", "drop":
	case "help":
		global.Usage()
		return exitOK
	default:
		return usageErr("unknown command %q: want ls, inspect, release, gates, open, results or drop", clean(cmd))
	}
	fs := flags(cmd, &o, stderr)
	operands, err := parse(fs, rest[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.Usage()
			return exitOK
		}
		return usageErr("%s: %v", cmd, err)
	}
	if o.timeout <= 0 {
		return usageErr("-timeout must be positive")
	}
	if o.limit < 0 {
		return usageErr("-limit must not be negative")
	}

	// The operands, checked before connecting.
	var key lockcore.Key
	switch cmd {
	case "ls", "results":
		if len(operands) > 1 {
			return usageErr("%s takes at most one PREFIX, not %d operands", cmd, len(operands))
		}
	case "gates":
		if len(operands) != 0 {
			return usageErr("gates takes no operands, not %d", len(operands))
		}
	case "inspect", "release", "open", "drop":
		if len(operands) != 1 {
			return usageErr("%s takes one KEY, not %d operands", cmd, len(operands))
		}
		if key, err = lockcore.ParseKey(operands[0]); err != nil {
			return usageErr("%s: %v", cmd, err)
		}
	}
	if cmd == "release" {
		o.reason = strings.TrimSpace(o.reason)
		if o.reason == "" {
			return usageErr("release needs -reason TEXT: why the lock is force-released, kept in its audit record")
		}
		if err := operate.CheckReason(o.reason); err != nil {
			return usageErr("-reason: %v", err)
		}
	}

	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	op, where, closeOp, err := open(env, o.prefix)
	if err != nil {
		fmt.Fprintf(stderr, "routelock: %s\n", unprefixed(err))
		return exitError
	}
	defer closeOp()
	fail := func(err error) int {
		switch {
		case errors.Is(err, lockcore.ErrNotHeld):
			fmt.Fprintf(stderr, "routelock: %s is not held\n", key)
			return exitNotHeld
		case errors.Is(err, lockcore.ErrMisconfigured):
			fmt.Fprintf(stderr, "routelock: %s refuses the engine (check the credentials and database of its URL): %s\n", where, unprefixed(err))
		case errors.Is(err, lockcore.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
			fmt.Fprintf(stderr, "routelock: %s is unavailable: %s\n", where, unprefixed(err))
		default:
			fmt.Fprintf(stderr, "routelock: %s\n", unprefixed(err))
		}
		return exitError
	}

	out := newPrinter(stdout, timeNow())
	switch cmd {
	case "ls":
		prefix := ""
		if len(operands) == 1 {
			prefix = operands[0]
		}
		infos, more, err := op.List(ctx, prefix, o.limit)
		if err != nil {
			return fail(err)
		}
		guard := guardLeft(ctx, op)
		if o.json {
			l := operate.List{Locks: make([]operate.Lock, len(infos)), More: more, RestartGuardMillis: guard.Milliseconds()}
			for i, in := range infos {
				l.Locks[i] = operate.FromInfo(in)
			}
			return writeJSON(stdout, stderr, l)
		}
		out.guard(guard)
		out.list(infos)
		if more {
			fmt.Fprintf(stderr, "routelock: more locks than -limit %d: narrow the prefix or raise the limit\n", o.limit)
		}
	case "inspect":
		in, err := op.Inspect(ctx, key)
		if err != nil {
			return fail(err)
		}
		if in.Key == "" {
			in.Key = key.String()
		}
		guard := guardLeft(ctx, op)
		if o.json {
			l := operate.FromInfo(in)
			l.RestartGuardMillis = guard.Milliseconds()
			return writeJSON(stdout, stderr, l)
		}
		out.guard(guard)
		out.lock(in)
	case "release":
		rev, err := op.Revoke(ctx, key, o.reason)
		if err != nil {
			return fail(err)
		}
		if rev.Key == "" {
			rev.Key = key.String()
		}
		if o.json {
			return writeJSON(stdout, stderr, operate.FromRevocation(rev))
		}
		out.revocation(rev)
	case "gates", "open":
		gk, ok := op.(lockcore.Gatekeeper)
		if !ok {
			fmt.Fprintf(stderr, "routelock: %s: the engine has no gates (closed by lock.SoldOut): none to list or open\n", where)
			return exitError
		}
		if cmd == "open" {
			if err := gk.OpenGate(ctx, key); err != nil {
				return fail(err)
			}
			if o.json {
				return writeJSON(stdout, stderr, operate.Opened{Opened: key.String()})
			}
			out.printf("opened the gate of %s: every instance serves it again\n", clean(key.String()))
			break
		}
		gs, err := gk.Gates(ctx)
		if err != nil {
			return fail(err)
		}
		if o.json {
			return writeJSON(stdout, stderr, operate.FromGates(gs))
		}
		out.gates(gs)
	case "results", "drop":
		rs, ok := operate.ResultsOf(op)
		if !ok {
			fmt.Fprintf(stderr, "routelock: %s: the engine keeps no results (idempotency keys): none to list or drop\n", where)
			return exitError
		}
		if cmd == "drop" {
			found, err := rs.DropResult(ctx, key)
			if err != nil {
				return fail(err)
			}
			if !found {
				fmt.Fprintf(stderr, "routelock: no result is stored for %s\n", clean(key.String()))
				return exitNotHeld
			}
			if o.json {
				return writeJSON(stdout, stderr, operate.Dropped{Dropped: key.String()})
			}
			out.printf("dropped the stored result of %s: the next request with its idempotency key runs again\n", clean(key.String()))
			break
		}
		prefix := ""
		if len(operands) == 1 {
			prefix = operands[0]
		}
		limit := o.limit
		if limit == 0 {
			limit = math.MaxInt // all: StoredResults takes a positive limit
		}
		stored, more, err := rs.StoredResults(ctx, prefix, limit)
		if err != nil {
			return fail(err)
		}
		if o.json {
			return writeJSON(stdout, stderr, operate.FromStoredResults(stored, more))
		}
		out.results(stored)
		if more {
			fmt.Fprintf(stderr, "routelock: more results than -limit %d: narrow the prefix or raise the limit\n", o.limit)
		}
	}
	if err := out.err(); err != nil {
		fmt.Fprintf(stderr, "routelock: %s\n", unprefixed(err))
		return exitError
	}
	return exitOK
}

// guardLeft returns how long the restart guard of op still refuses fresh
// locks (operate.RestartGuard): 0 when it does not, and when op keeps no
// guard or cannot say, as the listing it goes with then says.
func guardLeft(ctx context.Context, op lockcore.Operator) time.Duration {
	left, err := operate.RestartGuard(ctx, op)
	if err != nil {
		return 0
	}
	return left
}

func writeJSON(stdout, stderr io.Writer, v any) int {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(stderr, "routelock: %s\n", unprefixed(err))
		return exitError
	}
	return exitOK
}

// timeNow is the clock the human output's "ago" and "in" read. Tests
// replace it.
var timeNow = time.Now

// QuorumVar names the independent masters of the quorum engine
// (lockcore/quorumengine): redis:// URLs, comma-separated.
const QuorumVar = "REDIS_QUORUM_URLS"

// OpenRedis is the Opener of the Redis engine on the Redis the
// environment names (see redisconf), with key prefix prefix, by default
// "routelock:"; or, when QuorumVar is set, of the quorum engine on the
// masters it names.
func OpenRedis(env func(string) string, prefix string) (lockcore.Operator, string, func(), error) {
	if prefix == "" {
		prefix = defaultPrefix
	}
	if env(QuorumVar) != "" {
		return openQuorum(env, prefix)
	}
	conf, err := redisconf.FromEnv(env)
	if err != nil {
		return nil, "", nil, err
	}
	// Calls stop at the context's deadline (-timeout), not after the
	// client's own retries.
	rdb := conf.Open(func(o *redisconf.Common) { *o.ContextTimeoutEnabled = true })
	// OperatorOnly: the command takes no lock, and must not decide the
	// restart guard with a MaxTTL that is not the one the application's
	// engines share.
	e, err := redisengine.New(rdb, redisengine.Options{Prefix: prefix, OperatorOnly: true})
	if err != nil {
		_ = rdb.Close()
		return nil, "", nil, fmt.Errorf("%w (-prefix)", err)
	}
	return e, "Redis at " + conf.Where, func() {
		_ = e.Close()
		_ = rdb.Close()
	}, nil
}

// openQuorum opens the Operator of the quorum engine on the masters that
// QuorumVar names. Its errors name the variable, never its value.
func openQuorum(env func(string) string, prefix string) (lockcore.Operator, string, func(), error) {
	for _, v := range []string{redisconf.Server, redisconf.Cluster, redisconf.Sentinel} {
		if env(v) != "" {
			return nil, "", nil, fmt.Errorf("%w: %s and %s are both set: set one", lockcore.ErrMisconfigured, QuorumVar, v)
		}
	}
	var cs []redis.UniversalClient
	closeAll := func() {
		for _, c := range cs {
			_ = c.Close()
		}
	}
	for i, u := range strings.Split(env(QuorumVar), ",") {
		o, err := redis.ParseURL(strings.TrimSpace(u))
		if err != nil {
			closeAll()
			return nil, "", nil, fmt.Errorf("%w: %s: master %d is not a redis:// URL", lockcore.ErrMisconfigured, QuorumVar, i+1)
		}
		o.ContextTimeoutEnabled = true
		cs = append(cs, redis.NewClient(o))
	}
	e, err := quorumengine.New(cs, quorumengine.Options{Prefix: prefix})
	if err != nil {
		closeAll()
		return nil, "", nil, fmt.Errorf("%w (-prefix)", err)
	}
	op, ok := e.(lockcore.Operator)
	if !ok {
		_ = e.Close()
		closeAll()
		return nil, "", nil, fmt.Errorf("%w: the quorum engine has no operator", lockcore.ErrMisconfigured)
	}
	return op, fmt.Sprintf("a quorum of %d Redis masters", len(cs)), func() {
		_ = e.Close()
		closeAll()
	}, nil
}

// unprefixed returns err's text without the "routelock: " it begins with,
// for a line that says "routelock: " itself: the prefix is said once.
func unprefixed(err error) string { return strings.TrimPrefix(err.Error(), "routelock: ") }
