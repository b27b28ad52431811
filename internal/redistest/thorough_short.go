//go:build !long

package redistest

// thorough: without the long tag, a real redis-server, when there is one,
// is the only backend and the only deployment (unless the environment
// names a Cluster or a Sentinel set-up): miniredis runs on a machine
// without one, and the multi-node set-ups, which take seconds to start,
// with the long tag.
const thorough = false
