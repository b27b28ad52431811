package main

import (
	"fmt"
	"strings"

	"github.com/routelock/lock/lockcore"
)

// maxKeyLen bounds an escaped key: MaxKeyParts parts of MaxKeyPartLen
// bytes, each byte escaped as %XX, and the separators.
const maxKeyLen = lockcore.MaxKeyParts*(3*lockcore.MaxKeyPartLen+1) - 1

// parseKey turns an escaped key, as ls prints it (productID:42), back into
// a lockcore.Key: it splits s on ':' and decodes each part's %XX escapes,
// the inverse of lockcore.NewKey's escaping. It also accepts what NewKey
// would have escaped written plainly (a space, lower-case hex digits); a
// '%' that does not start two hex digits is an error, as is a part list
// NewKey refuses.
func parseKey(s string) (lockcore.Key, error) {
	if s == "" {
		return lockcore.Key{}, fmt.Errorf("%w: empty", lockcore.ErrInvalidKey)
	}
	if len(s) > maxKeyLen {
		return lockcore.Key{}, fmt.Errorf("%w: %d bytes, at most %d", lockcore.ErrInvalidKey, len(s), maxKeyLen)
	}
	raw := strings.SplitN(s, ":", lockcore.MaxKeyParts+1)
	parts := make([]string, len(raw))
	for i, p := range raw {
		u, err := unescapePart(p)
		if err != nil {
			return lockcore.Key{}, fmt.Errorf("%w: part %d: %v", lockcore.ErrInvalidKey, i, err)
		}
		parts[i] = u
	}
	return lockcore.NewKey(parts...)
}

// unescapePart decodes the %XX escapes of one key part.
func unescapePart(p string) (string, error) {
	if strings.IndexByte(p, '%') < 0 {
		return p, nil
	}
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(p) {
			return "", fmt.Errorf("'%%' at byte %d is not followed by two hex digits", i)
		}
		hi, ok1 := unhex(p[i+1])
		lo, ok2 := unhex(p[i+2])
		if !ok1 || !ok2 {
			return "", fmt.Errorf("'%%' at byte %d is not followed by two hex digits", i)
		}
		b.WriteByte(hi<<4 | lo)
		i += 2
	}
	return b.String(), nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
