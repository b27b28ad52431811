// Package keylimit holds the limits on the parts of a lock key. Package
// lockcore enforces them when it makes a key, with a copy of its own (it
// links nothing but the standard library) that a test holds equal; the
// key functions and the gRPC field readers check names and values against
// them early, so that a key that passes there is accepted by every engine.
// It links nothing but the standard library.
package keylimit

// Limits on key parts. A key names one resource; anything longer is far more
// likely to be a mistake or an attack than a real identifier.
const (
	Parts   = 8   // parts in one key
	PartLen = 256 // bytes in one part, before escaping
)
