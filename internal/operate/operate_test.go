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

// results is an Operator that has a lockcore.Results' methods and
// declares what p says; its other methods are never called.
type results struct {
	lockcore.Results
	lockcore.Operator
	p lockcore.Promises
}

func (r results) Promises() lockcore.Promises { return r.p }

// TestResultsOf: an Operator is taken for one that keeps results only when
// it has the methods and declares Promises.Results.
func TestResultsOf(t *testing.T) {
	for _, c := range []struct {
		name string
		op   lockcore.Operator
		want bool
	}{
		{"operator only", struct{ lockcore.Operator }{}, false},
		{"the methods, not the promise", results{}, false},
		{"the methods and the promise", results{p: lockcore.Promises{Results: true}}, true},
	} {
		rs, ok := operate.ResultsOf(c.op)
		if ok != c.want || (rs != nil) != c.want {
			t.Errorf("%s: ResultsOf = %v, %v; want ok %v", c.name, rs, ok, c.want)
		}
	}
}
