package lockcore

import (
	"fmt"
	"strconv"
	"strings"
)

// Limits on key parts, which NewKey and ParseKey enforce: a key names one
// resource, and anything longer is far more likely a mistake or an attack
// than a real identifier. The key functions check against the same numbers
// in internal/keylimit, which a test holds equal to these: lockcore links
// nothing but the standard library.
const (
	maxParts   = 8   // parts in one key
	maxPartLen = 256 // bytes in one part, before escaping
)

// Key is a validated, escaped lock key: the resource a lock protects, such as
// productID:42. Build it with NewKey. The zero Key is invalid.
type Key struct{ s string }

// NewKey joins parts into a Key. Every part must be non-empty and at most
// 256 bytes; there may be at most 8 parts. Parts are
// joined with ':' after escaping, so distinct part lists never produce the
// same key: '%', ':', '{', '}', space, control bytes and bytes outside
// printable ASCII are written as %XX. The result never contains a '{' or '}',
// so user input cannot move a lock to another Redis Cluster slot or out of an
// engine's prefix.
func NewKey(parts ...string) (Key, error) {
	if len(parts) == 0 {
		return Key{}, fmt.Errorf("%w: no parts", ErrInvalidKey)
	}
	if len(parts) > maxParts {
		return Key{}, fmt.Errorf("%w: %d parts, at most %d", ErrInvalidKey, len(parts), maxParts)
	}
	n := len(parts) - 1
	for i, p := range parts {
		if p == "" {
			return Key{}, fmt.Errorf("%w: part %d is empty", ErrInvalidKey, i)
		}
		if len(p) > maxPartLen {
			return Key{}, fmt.Errorf("%w: part %d is %d bytes, at most %d", ErrInvalidKey, i, len(p), maxPartLen)
		}
		n += escapedLen(p)
	}
	var b strings.Builder
	b.Grow(n)
	for i, p := range parts {
		if i > 0 {
			b.WriteByte(':')
		}
		appendEscaped(&b, p)
	}
	return Key{s: b.String()}, nil
}

// String returns the escaped key, e.g. "productID:42".
func (k Key) String() string { return k.s }

// Name returns the key's first part, escaped: the resource's name, such as
// productID for productID:42 (and for its segments). Logs, metrics and
// spans name a lock by it; the other parts are request data.
func (k Key) Name() string {
	if i := strings.IndexAny(k.s, ": "); i >= 0 {
		return k.s[:i]
	}
	return k.s
}

// maxSegments bounds the segment numbers of keys (segment): a
// resource is split into at most this many segments.
const maxSegments = 256

// segmentMark starts the suffix of a segment's key: a space, which NewKey
// always escapes, so that no key NewKey makes reads as a segment's.
const segmentMark = " #"

// segment returns the key of segment i (0 ≤ i < 256) of k's resource,
// such as "productID:42 #3", as ParseKey reads it (the Locker makes
// segments' keys with ParseKey). No key that NewKey makes is a
// segment's. Panics if i is out of range or k is zero or a segment's key
// itself.
func (k Key) segment(i int) Key {
	if i < 0 || i >= maxSegments || k.isZero() || strings.Contains(k.s, segmentMark) {
		panic(fmt.Sprintf("routelock: lockcore: segment %d of %q", i, k.s))
	}
	return Key{s: k.s + segmentMark + strconv.Itoa(i)}
}

// isZero reports whether k is the zero Key.
func (k Key) isZero() bool { return k.s == "" }

func needsEscape(c byte) bool {
	return c <= ' ' || c >= 0x7f || c == '%' || c == ':' || c == '{' || c == '}'
}

func escapedLen(p string) int {
	n := len(p)
	for i := 0; i < len(p); i++ {
		if needsEscape(p[i]) {
			n += 2
		}
	}
	return n
}

func appendEscaped(b *strings.Builder, p string) {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(p); i++ {
		c := p[i]
		if needsEscape(c) {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
}

// ParseKey returns the Key whose String is s: s must be as NewKey writes
// keys, parts joined with ':', each escaped exactly as NewKey escapes it
// (upper-case %XX for the bytes it escapes, and for no other), or such a
// key followed by a segment's suffix, " #" and a number below 256. So
// ParseKey(k.String()) returns k for every Key k, and anything else is an
// error matching ErrInvalidKey. It turns a key that an Operator listed
// (Info.Key) back into a Key.
func ParseKey(s string) (Key, error) {
	if j := strings.Index(s, segmentMark); j >= 0 {
		n := s[j+len(segmentMark):]
		i, err := strconv.Atoi(n)
		if err != nil || i < 0 || i >= maxSegments || strconv.Itoa(i) != n {
			return Key{}, fmt.Errorf("%w: %q is not a segment's suffix (\" #\" and a number below 256)", ErrInvalidKey, s[j:])
		}
		base, err := ParseKey(s[:j])
		if err != nil {
			return Key{}, err
		}
		return base.segment(i), nil
	}
	if s == "" {
		return Key{}, fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	parts := strings.Split(s, ":")
	if len(parts) > maxParts {
		return Key{}, fmt.Errorf("%w: %d parts, at most %d", ErrInvalidKey, len(parts), maxParts)
	}
	for i, p := range parts {
		if p == "" {
			return Key{}, fmt.Errorf("%w: part %d is empty", ErrInvalidKey, i)
		}
		n := 0 // the part's length before escaping
		for j := 0; j < len(p); j++ {
			n++
			c := p[j]
			if c != '%' {
				if needsEscape(c) {
					return Key{}, fmt.Errorf("%w: part %d: byte %d (%q) is not escaped", ErrInvalidKey, i, j, c)
				}
				continue
			}
			hi, ok1 := upperHex(p, j+1)
			lo, ok2 := upperHex(p, j+2)
			if !ok1 || !ok2 || !needsEscape(hi<<4|lo) {
				return Key{}, fmt.Errorf("%w: part %d: '%%' at byte %d does not start an escape as NewKey writes it", ErrInvalidKey, i, j)
			}
			j += 2
		}
		if n > maxPartLen {
			return Key{}, fmt.Errorf("%w: part %d is %d bytes, at most %d", ErrInvalidKey, i, n, maxPartLen)
		}
	}
	return Key{s: s}, nil
}

// upperHex returns the value of the upper-case hex digit at s[i].
func upperHex(s string, i int) (byte, bool) {
	if i >= len(s) {
		return 0, false
	}
	switch c := s[i]; {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
