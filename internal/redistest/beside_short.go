//go:build !long

package redistest

// besideReal: without the long tag, a real redis-server, when there is
// one, is the only backend: miniredis runs on a machine without one.
const besideReal = false
