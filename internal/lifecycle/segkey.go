package lifecycle

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/routelock/lock/lockcore"
)

// segmentMark starts the suffix of a segment's key, as lockcore.ParseKey
// reads it: a space, which lockcore.NewKey always escapes, so that no key
// NewKey makes reads as a segment's.
const segmentMark = " #"

// SegmentKey returns the key of segment i (0 ≤ i < MaxSegments) of k's
// resource, such as "productID:42 #3": a lock of its own, which excludes
// only the holders of the same segment; on a Redis Cluster it has a hash
// tag of its own, so that the segments spread over the slots (two may
// still share one). An engine sees it as any other key. Panics if i is
// out of range or k is zero or a segment's key itself.
func SegmentKey(k lockcore.Key, i int) lockcore.Key {
	s, err := lockcore.ParseKey(k.String() + segmentMark + strconv.Itoa(i))
	if err != nil || i < 0 || i >= MaxSegments {
		panic(fmt.Sprintf("routelock: the key of segment %d of %q", i, k))
	}
	return s
}

// Segmented reports whether k is the key of a segment (SegmentKey), and
// returns the key of its resource and the segment's number.
func Segmented(k lockcore.Key) (base lockcore.Key, i int, ok bool) {
	s := k.String()
	j := strings.Index(s, segmentMark)
	if j < 0 {
		return k, 0, false
	}
	i, err := strconv.Atoi(s[j+len(segmentMark):])
	if err != nil {
		return k, 0, false
	}
	base, err = lockcore.ParseKey(s[:j])
	if err != nil {
		return k, 0, false
	}
	return base, i, true
}
