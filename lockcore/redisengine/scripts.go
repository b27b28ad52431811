package redisengine

import (
	"context"
	"crypto/sha1"
	_ "embed" // the Lua sources
	"encoding/hex"
	"strings"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/common.lua
	luaCommon string
	//go:embed lua/acquire.lua
	luaAcquire string
	//go:embed lua/release.lua
	luaRelease string
	//go:embed lua/renew.lua
	luaRenew string
)

// The scripts run by EVALSHA, falling back to EVAL when Redis does not have
// them cached (first use, or after a restart or SCRIPT FLUSH).
var (
	acquireScript = newScript(withCommon(luaAcquire), false)
	// reenterScript is the acquire script called with other tokens that
	// may re-enter, whose reply may then be an array.
	reenterScript = &script{src: acquireScript.src, sha: acquireScript.sha, array: true}
	releaseScript = newScript(withCommon(luaRelease), true)
	renewScript   = redis.NewScript(luaRenew) // pipelined by the watchdog
)

// withCommon puts the shared functions where src marks them, after its fast
// path.
func withCommon(src string) string {
	const mark = "-- @common\n"
	if !strings.Contains(src, mark) {
		panic("lockcore: script without " + mark)
	}
	return strings.Replace(src, mark, luaCommon, 1)
}

// script is a Lua script run with arguments that the caller lays out
// itself: go-redis's Script boxes every key and argument anew on each call,
// which is most of a lock's allocations. Its reply is an integer, or, when
// array is set, an integer or an array.
type script struct {
	src, sha any // boxed once
	array    bool
}

func newScript(src string, array bool) *script {
	sum := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(sum[:]), array: array}
}

// cmd returns the EVALSHA command of the script with args, whose first two
// elements it fills with the command and the script (args[2] is the number
// of keys, then the keys and the arguments). It is a *redis.IntCmd, or a
// *redis.Cmd when the reply may be an array.
func (s *script) cmd(ctx context.Context, args []any) redis.Cmder {
	args[0], args[1] = "evalsha", s.sha
	return s.newCmd(ctx, args)
}

func (s *script) newCmd(ctx context.Context, args []any) redis.Cmder {
	if s.array {
		return redis.NewCmd(ctx, args...)
	}
	return redis.NewIntCmd(ctx, args...)
}

// known returns cmd, which has run, or, when Redis did not know the script
// (first use, a restart, SCRIPT FLUSH), the same call run again with EVAL.
func (s *script) known(ctx context.Context, rdb redis.UniversalClient, cmd redis.Cmder) redis.Cmder {
	if err := cmd.Err(); err == nil || !redis.HasErrorPrefix(err, "NOSCRIPT") {
		return cmd
	}
	args := cmd.Args()
	args[0], args[1] = "eval", s.src
	cmd = s.newCmd(ctx, args)
	_ = rdb.Process(ctx, cmd)
	return cmd
}
