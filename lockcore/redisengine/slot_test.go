package redisengine

import (
	"strconv"
	"testing"
)

// The slots of names whose slots Redis documents or that a server reported
// (CLUSTER KEYSLOT on redis-server 7.0.15).
func TestSlotOf(t *testing.T) {
	for name, want := range map[string]int{
		"123456789":                  12739, // the CRC16-XMODEM check value 0x31C3, mod 16384
		"foo":                        12182,
		"{user1000}.following":       slotOf("user1000"),
		"foo{}{bar}":                 slotOf("foo{}{bar}"), // an empty first tag hashes the whole name
		"foo{{bar}}zap":              slotOf("{bar"),
		"routelock:{productID:42}:q": slotOf("productID:42"),
	} {
		if got := slotOf(name); got != want {
			t.Errorf("slotOf(%q) = %d, want %d", name, got, want)
		}
	}
	if slotOf("foo{}{bar}") == slotOf("bar") {
		t.Errorf("an empty first hash tag must not hash the second one")
	}
}

func TestSlotTagCoversEverySlot(t *testing.T) {
	for s := range slots {
		tag := slotTag(s)
		if got := slotOf("x{" + tag + "}y"); got != s {
			t.Fatalf("slotTag(%d) = %q, in slot %d", s, tag, got)
		}
		if len(tag) > 4 {
			t.Fatalf("slotTag(%d) = %q: longer than 4", s, tag)
		}
	}
	if _, err := strconv.ParseUint(slotTag(0), 36, 32); err != nil {
		t.Fatal(err)
	}
}
