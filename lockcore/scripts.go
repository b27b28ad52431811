package lockcore

import (
	_ "embed" // the Lua sources

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
	acquireScript = redis.NewScript(luaCommon + luaAcquire)
	releaseScript = redis.NewScript(luaCommon + luaRelease)
	renewScript   = redis.NewScript(luaCommon + luaRenew)
)
