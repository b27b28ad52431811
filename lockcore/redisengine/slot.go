package redisengine

import (
	"strconv"
	"strings"
	"sync"
)

// slots is the number of hash slots of a Redis Cluster.
const slots = 16384

// crcTable is CRC16-XMODEM (polynomial 0x1021) by byte, as Redis Cluster
// hashes keys.
var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

func crc16(s string) uint16 {
	var c uint16
	for i := 0; i < len(s); i++ {
		c = c<<8 ^ crcTable[byte(c>>8)^s[i]]
	}
	return c
}

// slotOf returns the Cluster slot of a Redis key or shard channel: that of
// its hash tag, the part between its first '{' and the next '}' when that
// part is not empty, else of the whole name.
func slotOf(name string) int {
	if i := strings.IndexByte(name, '{'); i >= 0 {
		if j := strings.IndexByte(name[i+1:], '}'); j > 0 {
			name = name[i+1 : i+1+j]
		}
	}
	return int(crc16(name) % slots)
}

var (
	tagsOnce sync.Once
	tags     []uint32 // by slot: a number whose base-36 digits hash to it
)

// slotTag returns a short hash tag in slot s: "{" + slotTag(s) + "}" in a
// name puts it in slot s. The table of tags is made once, on first use
// (about 170,000 CRCs of 1 to 4 bytes).
func slotTag(s int) string {
	tagsOnce.Do(func() {
		tags = make([]uint32, slots)
		found := make([]bool, slots)
		var b [8]byte
		for n, left := uint32(0), slots; left > 0; n++ {
			x := int(crc16(string(strconv.AppendUint(b[:0], uint64(n), 36))) % slots)
			if !found[x] {
				found[x], tags[x] = true, n
				left--
			}
		}
	})
	return strconv.FormatUint(uint64(tags[s]), 36)
}
