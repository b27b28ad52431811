package lockcore

import (
	"testing"

	"github.com/routelock/lock/internal/keylimit"
)

// TestKeyLimitsAgree: the limits NewKey enforces are the ones the key
// functions check early (internal/keylimit), so that a key that passes
// there is accepted by every engine.
func TestKeyLimitsAgree(t *testing.T) {
	if maxParts != keylimit.Parts || maxPartLen != keylimit.PartLen {
		t.Fatalf("lockcore allows %d parts of %d bytes, internal/keylimit %d of %d", maxParts, maxPartLen, keylimit.Parts, keylimit.PartLen)
	}
}
