//go:build long

package redistest

// thorough: with the long tag (CI selects it), tests that run on every
// backend run on miniredis beside a real redis-server, so that the
// embedded server the examples start keeps working, and tests that run on
// every deployment run on a Cluster and a Sentinel set-up too.
const thorough = true
