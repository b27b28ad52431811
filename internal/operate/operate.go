// Package operate holds what the engines and the operators' tools (package
// admin, the routelock command) must agree on, so that each is written
// once: which revoke reasons are accepted, the digest by which an owner is
// shown instead of its token, and the JSON form in which admin and the
// routelock command show locks (Lock, List, Revocation, Error) and stored
// results (Results, Dropped), and how both find an engine's stored results
// (ResultsOf).
package operate

import (
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/routelock/lock/lockcore"
)

// MaxReasonLen is the longest revoke reason accepted, in bytes: the reason
// is kept in the audit record and shown to operators.
const MaxReasonLen = 256

// CheckReason returns an error matching lockcore.ErrInvalidReason, saying
// what is wrong, unless reason is 1 to MaxReasonLen bytes of UTF-8 text
// without control characters. It does not trim reason: a tool that reads
// it from a person trims it first.
func CheckReason(reason string) error {
	switch {
	case reason == "":
		return fmt.Errorf("%w: it is empty", lockcore.ErrInvalidReason)
	case len(reason) > MaxReasonLen:
		return fmt.Errorf("%w: it is %d bytes, longer than %d", lockcore.ErrInvalidReason, len(reason), MaxReasonLen)
	case !utf8.ValidString(reason):
		return fmt.Errorf("%w: it is not UTF-8", lockcore.ErrInvalidReason)
	}
	for i, r := range reason {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: it contains control characters (%U at byte %d)", lockcore.ErrInvalidReason, r, i)
		}
	}
	return nil
}
