package operate_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/routelock/lock/internal/operate"
	"github.com/routelock/lock/lockcore"
)

func TestCheckReason(t *testing.T) {
	for _, reason := range []string{
		"x",
		"stuck since the 14:02 deploy",
		" padded ", // trimming is the caller's
		strings.Repeat("x", operate.MaxReasonLen),
		strings.Repeat("é", operate.MaxReasonLen/2), // bytes, not characters
		"naïve — 日本語",
	} {
		if err := operate.CheckReason(reason); err != nil {
			t.Errorf("CheckReason(%q): %v", reason, err)
		}
	}
	for _, tc := range []struct{ reason, says string }{
		{"", "empty"},
		{strings.Repeat("x", operate.MaxReasonLen+1), "257 bytes, longer than 256"},
		{strings.Repeat("é", operate.MaxReasonLen/2) + "x", "longer than 256"},
		{"\xff\xfe", "not UTF-8"},
		{"ok\xc3", "not UTF-8"},
		{"two\nlines", "control characters (U+000A at byte 3)"},
		{"tab\there", "control characters (U+0009 at byte 3)"},
		{"bell\a", "control characters"},
		{"del\x7f", "control characters"},
		{"c1\u0085", "control characters (U+0085 at byte 2)"},
	} {
		err := operate.CheckReason(tc.reason)
		if !errors.Is(err, lockcore.ErrInvalidReason) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("CheckReason(%q): %v; want lockcore.ErrInvalidReason saying %q", tc.reason, err, tc.says)
		}
		if tc.reason != "" && strings.Contains(err.Error(), tc.reason) {
			t.Errorf("CheckReason(%q): %v repeats the reason", tc.reason, err)
		}
	}
}
