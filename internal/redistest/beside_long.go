//go:build long

package redistest

// besideReal: with the long tag (CI selects it), tests that run on every
// backend run on miniredis beside a real redis-server, so that the
// embedded server the examples start keeps working.
const besideReal = true
