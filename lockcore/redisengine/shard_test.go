package redisengine

import (
	"testing"
	"time"

	"github.com/routelock/lock/lockcore"
)

// primeShard puts in place l's subscription to its shard channel of key's
// slot, on a Cluster, as an earlier wait there leaves it: when it comes
// up, the slot's waiters are woken to ask Redis again (by reply).
func primeShard(t *testing.T, l *Engine, key lockcore.Key) {
	t.Helper()
	sh := l.nf.sh
	if sh == nil {
		return
	}
	slot := slotOf(l.redisKeys(key)[0])
	sh.want(slot)
	defer sh.unwant(slot)
	eventually(t, 5*time.Second, "the shard channel subscribed", func() bool { return sh.ready(slot) })
}
