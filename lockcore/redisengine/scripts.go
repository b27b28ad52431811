package redisengine

import (
	"context"
	"crypto/sha1"
	_ "embed" // the Lua sources
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/hold.lua
	luaHold string
	//go:embed lua/common.lua
	luaCommon string
	//go:embed lua/acquire.lua
	luaAcquire string
	//go:embed lua/release.lua
	luaRelease string
	//go:embed lua/renew.lua
	luaRenew string
	//go:embed lua/revoke.lua
	luaRevoke string
	//go:embed lua/guard.lua
	luaGuard string
	//go:embed lua/guardslots.lua
	luaGuardSlots string
	//go:embed lua/shared.lua
	luaShared string
	//go:embed lua/srenew.lua
	luaSharedRenew string
	//go:embed lua/all.lua
	luaAll string
	//go:embed lua/gate.lua
	luaGate string
	//go:embed lua/pass.lua
	luaPass string
)

// The scripts. Each is sent whole, as one self-contained source: a
// "#!lua" shebang, so that Redis 7 and later checks that it touches only
// the keys it declares (in a Cluster), then the hold's format (hold.lua),
// then the script, with the functions it shares with the others where it
// marks them, after its fast path. Out of memory, Redis refuses an acquire
// whole before it writes anything (503: no lock is taken), while releases,
// renewals and revocations, flagged allow-oom, run whole: they keep or free
// locks that are held, and a script refused halfway would leave a half-done
// hand-over. So does a gate's close or open, one small field: a sold-out
// resource refused in Redis spares it the buyers' locks, and a close
// refused there would be known to no other instance.
var (
	acquireScript = newScript(luaAcquire, "", false)
	// reenterScript is the acquire script called with other tokens that
	// may re-enter, whose reply may then be an array.
	reenterScript = &script{src: acquireScript.src, sha: acquireScript.sha, array: true}
	// sharedScript acquires a shared hold (Policy.Share).
	sharedScript = newScript(luaShared, "", true)
	// allScript takes several free locks at once (Engine.AcquireGroup).
	allScript = newScript(luaAll, "", true)
	// gateScript closes or opens a gate (Engine.CloseGate, OpenGate).
	gateScript    = newScript(luaGate, "allow-oom", false)
	releaseScript = newScript(luaRelease, "allow-oom", true)
	renewScript   = newScript(luaRenew, "allow-oom", false)
	// sharedRenewScript renews a shared hold.
	sharedRenewScript = newScript(luaSharedRenew, "allow-oom", false)
	revokeScript      = newScript(luaRevoke, "allow-oom", true)
	// passScript makes a hold handed over in memory its successor's in
	// Redis (Options.LocalHandOvers).
	passScript = newScript(luaPass, "allow-oom", false)
	// guardScript is always sent with EVAL: it runs when the server knows
	// none of the scripts (see runner.known).
	guardScript = newScript(luaGuard, "allow-oom", false)
	// slotsGuardScript is guardScript on a Cluster node, for each slot it
	// serves, whose keys it names itself.
	slotsGuardScript = newScript(luaGuardSlots, "allow-oom,allow-cross-slot-keys", false)

	scripts = []*script{acquireScript, reenterScript, sharedScript, allScript, gateScript, releaseScript, renewScript, sharedRenewScript, revokeScript, passScript}
)

// script is a Lua script run with arguments that the caller lays out
// itself: go-redis's Script boxes every key and argument anew on each call,
// which is most of a lock's allocations. Its reply is an integer, or, when
// array is set, an integer or an array. It has two sources, boxed once:
// [0] with the shebang, [1] without, for servers that do not read one
// (miniredis; Redis before 7 cannot run them anyway: see Check).
type script struct {
	src, sha [2]any
	array    bool
}

// newScript returns the script of body, whose shebang carries flags (a
// comma-separated list, or none).
func newScript(body, flags string, array bool) *script {
	src := luaHold + body
	if strings.Contains(body, commonMark) {
		src = luaHold + strings.Replace(body, commonMark, luaCommon, 1)
	}
	shebang := "#!lua\n"
	if flags != "" {
		shebang = "#!lua flags=" + flags + "\n"
	}
	s := &script{array: array}
	for i, src := range [2]string{shebang + src, src} {
		sum := sha1.Sum([]byte(src))
		s.src[i], s.sha[i] = src, hex.EncodeToString(sum[:])
	}
	return s
}

// commonMark is where a script wants the shared functions.
const commonMark = "-- @common\n"

// runner runs an Engine's scripts on its client: the one place that sends
// them, knows their SHAs, and falls back to EVAL when Redis does not have a
// script cached.
type runner struct {
	rdb redis.UniversalClient
	// plain: the server does not read a shebang, so the scripts go without.
	plain atomic.Bool
	// noScript, if set, runs when Redis does not know a script, before it
	// is sent with EVAL (and so cached again), with the call's first key,
	// which names the server on a Cluster; its error is the call's.
	noScript func(ctx context.Context, key string) error
	// cluster: the client is a Cluster's, whose nodes each have a script
	// cache of their own, so noScript runs for each slot that answers
	// NOSCRIPT in a run, not once per run.
	cluster bool
	// ack, when > 0, is how many replicas must acknowledge an acquisition
	// within ackMS: a pipeline with acquire calls ends with WAIT, which
	// counts the replicas that have every write of the pipeline's
	// connection, and a grant it finds short is failed (see confirm).
	ack   int
	ackMS int64
	// node, set on a Cluster when ack > 0, returns the client of the
	// master that owns a key's slot (see runOnMasters).
	node func(ctx context.Context, key string) (*redis.Client, error)
}

// replicaError is the error of an acquisition that fewer replicas
// acknowledged than Options.Replicas asked for: the hold it took is given
// back, and the caller is told lockcore.ErrUnavailable.
type replicaError struct {
	acked, want int   // replicas that acknowledged it, and that were asked for
	err         error // WAIT's own error, if it failed
}

func (e *replicaError) Error() string {
	if e.err != nil {
		return fmt.Sprintf("no replica acknowledgement: %v", e.err)
	}
	return fmt.Sprintf("acknowledged by %d of %d replicas", e.acked, e.want)
}

func (e *replicaError) Unwrap() error { return e.err }

// RedisError makes a shortfall an answer from Redis, not a network
// failure: Redis answered, and the calls that flew with it stand.
func (e *replicaError) RedisError() {}

// isAcquire reports whether cmd runs the acquire script.
func isAcquire(cmd redis.Cmder) bool {
	a := cmd.Args()
	if len(a) < 2 {
		return false
	}
	s, _ := scriptOf(a[1])
	if s == nil {
		s = scriptOfSource(a[1])
	}
	return s == acquireScript || s == reenterScript || s == sharedScript
}

// isKeep reports whether cmd runs the release script with a result to
// keep (Engine.Keep): with seven keys.
func isKeep(cmd redis.Cmder) bool {
	a := cmd.Args()
	if len(a) < 3 || a[2] != any(7) {
		return false
	}
	s, _ := scriptOf(a[1])
	if s == nil {
		s = scriptOfSource(a[1])
	}
	return s == releaseScript
}

// isAcked reports whether cmd is a write that Options.Replicas makes
// replicas acknowledge: an acquisition, or a release that keeps a result.
func isAcked(cmd redis.Cmder) bool { return isAcquire(cmd) || isKeep(cmd) }

// scriptOfSource returns the script whose source src is, or nil.
func scriptOfSource(src any) *script {
	for _, s := range scripts {
		for v := range s.src {
			if s.src[v] == src {
				return s
			}
		}
	}
	return nil
}

// confirm fails each acquire call of cmds that took or re-entered a hold,
// and each release that kept a result, when wait, the WAIT that followed
// them on their connection, counted fewer than r.ack replicas: the caller
// gives the hold back (a failed acquisition is withdrawn), or sends the
// Keep again, and is told ErrUnavailable.
func (r *runner) confirm(cmds []redis.Cmder, wait *redis.IntCmd) {
	n, err := wait.Result()
	if err == nil && n >= int64(r.ack) {
		return
	}
	if err != nil && unreachable(err) {
		return // the calls failed on the network too
	}
	short := &replicaError{acked: int(n), want: r.ack}
	if err != nil {
		short = &replicaError{want: r.ack, err: err}
	}
	for _, c := range cmds {
		if c.Err() != nil || !isAcked(c) {
			continue
		}
		if isKeep(c) {
			// Stored (or found stored by a run before): not so on the
			// replicas, as far as WAIT can tell. A Keep that found its
			// hold gone stored nothing, and says so.
			if c, ok := c.(*redis.Cmd); ok {
				if v, ok := c.Val().(int64); ok && v >= 0 {
					c.SetErr(short)
				}
			}
			continue
		}
		switch c := c.(type) {
		case *redis.IntCmd:
			if c.Val() > 0 {
				c.SetErr(short)
			}
		case *redis.Cmd:
			if a, ok := c.Val().([]any); ok && !(len(a) == 2 && a[1] == "upgrade") && !(len(a) == 3 && a[1] == "result") {
				c.SetErr(short) // a re-entry of another token's hold, or a shared hold
			} else if v, ok := c.Val().(int64); ok && v > 0 {
				c.SetErr(short)
			}
		}
	}
}

func (r *runner) variant() int {
	if r.plain.Load() {
		return 1
	}
	return 0
}

// sha returns the SHA1 that the EVALSHA of s carries on the wire.
func (r *runner) sha(s *script) string { return s.sha[r.variant()].(string) }

// cmd returns the EVALSHA command of s with args, whose first two elements
// it fills with the command and the script (args[2] is the number of keys,
// then the keys and the arguments). It is a *redis.IntCmd, or a
// *redis.Cmd when the reply may be an array.
func (r *runner) cmd(ctx context.Context, s *script, args []any) redis.Cmder {
	args[0], args[1] = "evalsha", s.sha[r.variant()]
	return s.newCmd(ctx, args)
}

func (s *script) newCmd(ctx context.Context, args []any) redis.Cmder {
	if s.array {
		return redis.NewCmd(ctx, args...)
	}
	return redis.NewIntCmd(ctx, args...)
}

// run sends cmds, made by cmd: one alone, or several as one pipeline. A
// command whose script Redis does not know (first use, a restart, SCRIPT
// FLUSH) is run again on its own with EVAL, and replaced in cmds. It
// returns the pipeline's network error, if any.
func (r *runner) run(ctx context.Context, cmds []redis.Cmder) error {
	var err error
	acks := r.ack > 0 && slices.ContainsFunc(cmds, isAcked)
	switch {
	case acks && r.node != nil:
		err = r.runOnMasters(ctx, cmds)
	case len(cmds) == 1 && !acks:
		err = r.rdb.Process(ctx, cmds[0])
	default:
		err = r.acked(ctx, r.rdb, cmds, acks)
	}
	var checked []int // the slots noScript ran for in this run
	for i, c := range cmds {
		cmds[i] = r.known(ctx, c, &checked)
	}
	if len(cmds) == 1 {
		err = cmds[0].Err()
	}
	if unreachable(err) {
		return err
	}
	return nil
}

// acked sends cmds to c as one pipeline, followed, when acks is set, by
// WAIT, and fails the acquisitions that too few replicas acknowledged
// (confirm). It returns the pipeline's error.
func (r *runner) acked(ctx context.Context, c redis.Cmdable, cmds []redis.Cmder, acks bool) error {
	p := c.Pipeline()
	for _, cmd := range cmds {
		_ = p.Process(ctx, cmd)
	}
	var wait *redis.IntCmd
	if acks {
		wait = redis.NewIntCmd(ctx, "wait", r.ack, r.ackMS)
		_ = p.Process(ctx, wait)
	}
	_, err := p.Exec(ctx)
	if acks {
		r.confirm(cmds, wait)
	}
	return err
}

// runOnMasters sends cmds on a Cluster whose acquisitions replicas must
// acknowledge: WAIT counts the replicas of the master it is sent to, for
// the writes of its connection, so each master's acquisitions go to that
// master's own client as one pipeline with WAIT (a ClusterClient would
// send WAIT to any node); the other calls go through the ClusterClient.
// An acquisition that a master answers MOVED is sent once more, to the
// master named (see redirect). It returns the first network error.
func (r *runner) runOnMasters(ctx context.Context, cmds []redis.Cmder) error {
	var (
		mu    sync.Mutex
		first error
	)
	note := func(err error) {
		mu.Lock()
		if first == nil && unreachable(err) {
			first = err
		}
		mu.Unlock()
	}
	byNode := make(map[*redis.Client][]redis.Cmder)
	var rest []redis.Cmder
	for _, cmd := range cmds {
		if !isAcked(cmd) {
			rest = append(rest, cmd)
			continue
		}
		node, err := r.node(ctx, keyArg(cmd))
		if err != nil {
			cmd.SetErr(err)
			note(err)
			continue
		}
		byNode[node] = append(byNode[node], cmd)
	}
	// The masters' pipelines go out at once, each on its own connection:
	// one after the other, each would wait for the last one's WAIT.
	var groups []func()
	if len(rest) > 0 {
		groups = append(groups, func() { note(r.acked(ctx, r.rdb, rest, false)) })
	}
	for node, cmds := range byNode {
		groups = append(groups, func() {
			note(r.acked(ctx, node, cmds, true))
			for _, cmd := range cmds {
				r.redirect(ctx, cmd)
			}
		})
	}
	var wg sync.WaitGroup
	for _, g := range groups[min(1, len(groups)):] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g()
		}()
	}
	if len(groups) > 0 {
		groups[0]() // in this goroutine
	}
	wg.Wait()
	return first
}

// keyArg returns the first key of a script call.
func keyArg(cmd redis.Cmder) string {
	switch k := cmd.Args()[3].(type) {
	case string:
		return k
	case *string:
		return *k
	}
	return fmt.Sprint(cmd.Args()[3])
}

// redirect follows, once, a MOVED answer to cmd, an acquisition sent to
// the master runOnMasters chose: its slot moved to the master the answer
// names. cmd is sent there again with WAIT, and the Cluster reloads its
// slots' owners. An ASK is not followed: the acquisition declares a key that
// seldom exists (its slot's restart guard), so while its slot migrates the
// target answers TRYAGAIN whatever is asked; the acquisition fails
// (ErrUnavailable) until the slot has moved.
func (r *runner) redirect(ctx context.Context, cmd redis.Cmder) {
	err := cmd.Err()
	if err == nil || !redis.HasErrorPrefix(err, "MOVED") {
		return
	}
	c, ok := r.rdb.(*redis.ClusterClient)
	if !ok {
		return
	}
	c.ReloadState(ctx)
	f := strings.Fields(err.Error())
	if len(f) < 3 {
		return
	}
	var node *redis.Client
	var mu sync.Mutex
	_ = c.ForEachShard(ctx, func(_ context.Context, n *redis.Client) error {
		if n.Options().Addr == f[2] {
			mu.Lock()
			node = n
			mu.Unlock()
		}
		return nil
	})
	if node == nil {
		return // not known yet: the call fails, and a later one finds it
	}
	cmd.SetErr(nil)
	p := node.Pipeline()
	_ = p.Process(ctx, cmd)
	wait := redis.NewIntCmd(ctx, "wait", r.ack, r.ackMS)
	_ = p.Process(ctx, wait)
	_, _ = p.Exec(ctx)
	r.confirm([]redis.Cmder{cmd}, wait)
}

// known returns cmd, which has run, or, when Redis did not know its script,
// the same call run again with EVAL, once noScript, if any, has run for
// its server (*checked lists the slots it has run for: on one server, any
// slot stands for the server). A server that cannot compile the script's
// shebang gets it without, from then on.
func (r *runner) known(ctx context.Context, cmd redis.Cmder, checked *[]int) redis.Cmder {
	err := cmd.Err()
	if err == nil || !redis.HasErrorPrefix(err, "NOSCRIPT") {
		return cmd
	}
	args := cmd.Args()
	s, v := scriptOf(args[1])
	if s == nil {
		return cmd
	}
	if r.noScript != nil {
		key, slot := keyArg(cmd), 0
		if r.cluster {
			slot = slotOf(key)
		}
		if !slices.Contains(*checked, slot) {
			if err := r.noScript(ctx, key); err != nil {
				cmd.SetErr(err)
				return cmd
			}
			*checked = append(*checked, slot)
		}
	}
	_, array := cmd.(*redis.Cmd)
	acks := r.ack > 0 && isAcked(cmd)
	eval := func(src any) redis.Cmder {
		args[0], args[1] = "eval", src
		if array {
			cmd = redis.NewCmd(ctx, args...)
		} else {
			cmd = redis.NewIntCmd(ctx, args...)
		}
		if !acks {
			_ = r.rdb.Process(ctx, cmd)
			return cmd
		}
		var c redis.Cmdable = r.rdb
		if r.node != nil {
			node, err := r.node(ctx, keyArg(cmd))
			if err != nil {
				cmd.SetErr(err)
				return cmd
			}
			c = node
		}
		_ = r.acked(ctx, c, []redis.Cmder{cmd}, true)
		r.redirect(ctx, cmd)
		return cmd
	}
	cmd = eval(s.src[v])
	if v == 0 && noShebang(cmd.Err()) {
		r.plain.Store(true)
		cmd = eval(s.src[1])
	}
	return cmd
}

// load makes Redis compile and cache s, with its shebang if the server
// reads one.
func (r *runner) load(ctx context.Context, s *script) error {
	v := r.variant()
	err := r.rdb.ScriptLoad(ctx, s.src[v].(string)).Err()
	if v == 0 && noShebang(err) {
		r.plain.Store(true)
		err = r.rdb.ScriptLoad(ctx, s.src[1].(string)).Err()
	}
	return err
}

// scriptOf returns a script and the variant whose SHA is sha.
func scriptOf(sha any) (*script, int) {
	for _, s := range scripts {
		for v := range s.sha {
			if s.sha[v] == sha {
				return s, v
			}
		}
	}
	return nil, 0
}

// noShebang reports whether err is a server's failure to compile a script
// at its shebang: miniredis (and Redis before 7) read "#!lua" as Lua.
func noShebang(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "Error compiling script") && strings.Contains(msg, "'#'")
}

// parseFence reads the value v of a lock's last fencing token, "<top>" or
// "<top> q" when waiters may be queued (see fence_read in lua/hold.lua).
func parseFence(v string) (int64, error) {
	top, _, _ := strings.Cut(v, " ")
	return strconv.ParseInt(top, 10, 64)
}

// holdValue is a hold as Redis stores it (see lua/hold.lua).
type holdValue struct {
	token   string   // the owner token: a secret, never shown
	fence   int64    // the fencing token
	since   int64    // when the hold was taken, in µs since the epoch (see parseHold)
	entries []string // the attempt ids that hold it
}

// parseHold reads the hold's stored value v (see lua/hold.lua, the format's
// definition). ok is false when v is not a hold.
func parseHold(v string) (h holdValue, ok bool) {
	f := strings.Fields(v)
	if len(f) < 5 || f[3] != "0" && f[3] != "1" {
		return holdValue{}, false
	}
	fence, err1 := strconv.ParseInt(f[1], 10, 64)
	since, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || fence < 0 || since < 0 {
		return holdValue{}, false
	}
	if since == 0 { // taken at once: its first entry began then
		since = entryStart(f[4])
	}
	return holdValue{token: f[0], fence: fence, since: since, entries: f[4:]}, true
}

// entryStart returns when attempt id began, by its engine's clock, in µs
// since the epoch (see nextID); 0 if id does not say.
func entryStart(id string) int64 {
	i := strings.LastIndexByte(id, '.')
	if i < 0 || strings.IndexByte(id, '.') == i {
		return 0
	}
	us, err := strconv.ParseInt(id[i+1:], 36, 64)
	if err != nil || us < 0 {
		return 0
	}
	return us
}
