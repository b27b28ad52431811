package lockcore

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
	acquireScript = newScript(withCommon(luaAcquire))
	releaseScript = newScript(withCommon(luaRelease))
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

// script is a Lua script with an integer reply, run with arguments that the
// caller lays out itself: go-redis's Script boxes every key and argument
// anew on each call, which is most of a lock's allocations.
type script struct {
	src, sha any // boxed once
}

func newScript(src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(sum[:])}
}

// cmd returns the EVALSHA command of the script with args, whose first two
// elements it fills with the command and the script (args[2] is the number
// of keys, then the keys and the arguments).
func (s *script) cmd(ctx context.Context, args []any) *redis.IntCmd {
	args[0], args[1] = "evalsha", s.sha
	return redis.NewIntCmd(ctx, args...)
}

// known returns cmd, which has run, or, when Redis did not know the script
// (first use, a restart, SCRIPT FLUSH), the same call run again with EVAL.
func (s *script) known(ctx context.Context, rdb redis.UniversalClient, cmd *redis.IntCmd) *redis.IntCmd {
	if err := cmd.Err(); err == nil || !redis.HasErrorPrefix(err, "NOSCRIPT") {
		return cmd
	}
	args := cmd.Args()
	args[0], args[1] = "eval", s.src
	cmd = redis.NewIntCmd(ctx, args...)
	_ = rdb.Process(ctx, cmd)
	return cmd
}

// run runs the script with args (laid out as for cmd): EVALSHA, then EVAL
// if Redis does not know the script.
func (s *script) run(ctx context.Context, rdb redis.UniversalClient, args []any) (int64, error) {
	cmd := s.cmd(ctx, args)
	_ = rdb.Process(ctx, cmd)
	return s.known(ctx, rdb, cmd).Result()
}
