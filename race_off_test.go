//go:build !race

package lock_test

// raceDetector: the tests run under the race detector, which slows the
// client several times over.
const raceDetector = false
