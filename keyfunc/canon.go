package keyfunc

import (
	"strings"

	"github.com/routelock/lock/internal/keylimit"
)

// canonical returns the one spelling of a key value that names the same
// resource however the client wrote it: a decimal integer (optional sign,
// leading zeros: "+042", "042", "-0") in canonical decimal ("42", "0"), of
// any length, and a UUID in lower-case 8-4-4-4-12 form, from any spelling
// that UUID parsers (github.com/google/uuid's Parse) read as one: either
// case, 32 hex digits without dashes, in braces, or as a urn:uuid: URN.
// Anything else is returned as it is. A value already canonical is returned
// without allocating.
func canonical(v string) string {
	if c, ok := canonInt(v); ok {
		return c
	}
	if c, ok := canonUUID(v); ok {
		return c
	}
	return v
}

// canonUUID returns the lower-case 8-4-4-4-12 form of v and true if v is a
// UUID in one of the spellings canonical names.
func canonUUID(v string) (string, bool) {
	switch {
	case len(v) == 36:
		if !isUUID(v) {
			return "", false
		}
		for i := 0; i < len(v); i++ {
			if 'A' <= v[i] && v[i] <= 'F' {
				return strings.ToLower(v), true
			}
		}
		return v, true
	case len(v) == 38 && v[0] == '{' && v[37] == '}' && isUUID(v[1:37]):
		return strings.ToLower(v[1:37]), true
	case len(v) == 45 && strings.EqualFold(v[:9], "urn:uuid:") && isUUID(v[9:]):
		return strings.ToLower(v[9:]), true
	case len(v) == 32:
		var b [36]byte
		j := 0
		for i := 0; i < 32; i++ {
			if i == 8 || i == 12 || i == 16 || i == 20 {
				b[j] = '-'
				j++
			}
			c := v[i]
			switch {
			case '0' <= c && c <= '9', 'a' <= c && c <= 'f':
			case 'A' <= c && c <= 'F':
				c += 'a' - 'A'
			default:
				return "", false
			}
			b[j] = c
			j++
		}
		return string(b[:]), true
	}
	return "", false
}

// canonInt returns the canonical decimal form of v and true if v is a
// decimal integer.
func canonInt(v string) (string, bool) {
	digits, neg := v, false
	if digits != "" && (digits[0] == '+' || digits[0] == '-') {
		neg = digits[0] == '-'
		digits = digits[1:]
	}
	if digits == "" {
		return "", false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return "", false
		}
	}
	digits = strings.TrimLeft(digits, "0")
	switch {
	case digits == "":
		return "0", true
	case !neg:
		return digits, true // a substring of v: no allocation
	case len(digits)+1 == len(v):
		return v, true // already "-" and no leading zero
	}
	return "-" + digits, true
}

// isUUID reports whether v is a UUID in its textual form,
// xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, in hex digits of either case.
func isUUID(v string) bool {
	if len(v) != 36 {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// maxExp bounds the exponent of a JSON number: anything larger cannot be
// written in keylimit.PartLen bytes, and is refused before any work
// that grows with it.
const maxExp = 10000

// canonNumber returns the canonical form of JSON number s (valid JSON
// number syntax, as encoding/json's Decoder hands it over), exact whatever
// its size: an integer value in canonical decimal (42, 42.0, 4.2e1 and
// 420e-1 are "42"), any other in plain decimal notation without trailing
// zeros (0.5, -1.25). A number whose exponent is absurd, or whose canonical
// form is longer than keylimit.PartLen bytes, is invalid.
func canonNumber(s string) (string, error) {
	if c, ok := canonInt(s); ok {
		return c, nil // the common case: an integer, most often canonical already
	}
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	mant, exp := s, 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant = s[:i]
		e := s[i+1:]
		eneg := false
		if e != "" && (e[0] == '+' || e[0] == '-') {
			eneg = e[0] == '-'
			e = e[1:]
		}
		e = strings.TrimLeft(e, "0")
		if len(e) > 5 {
			return "", errBigNumber
		}
		for i := 0; i < len(e); i++ {
			if e[i] < '0' || e[i] > '9' {
				return "", errMalformed
			}
			exp = exp*10 + int(e[i]-'0')
		}
		if exp > maxExp {
			return "", errBigNumber
		}
		if eneg {
			exp = -exp
		}
	}
	intPart, frac := mant, ""
	if i := strings.IndexByte(mant, '.'); i >= 0 {
		intPart, frac = mant[:i], mant[i+1:]
	}
	// The value is digits × 10^exp, digits without leading or trailing
	// zeros: one (digits, exp) per value.
	exp -= len(frac)
	digits := strings.TrimLeft(intPart+frac, "0")
	n := len(digits)
	digits = strings.TrimRight(digits, "0")
	exp += n - len(digits)
	if digits == "" {
		return "0", nil
	}
	size := len(digits) // the length of the canonical form
	switch {
	case exp >= 0:
		size += exp
	case -exp < len(digits):
		size++ // the point
	default:
		size += 2 + (-exp - len(digits)) // "0." and the zeros after the point
	}
	if neg {
		size++
	}
	if size > keylimit.PartLen {
		return "", errTooLong
	}
	var b strings.Builder
	b.Grow(size)
	if neg {
		b.WriteByte('-')
	}
	switch {
	case exp >= 0:
		b.WriteString(digits)
		for range exp {
			b.WriteByte('0')
		}
	case -exp < len(digits):
		point := len(digits) + exp
		b.WriteString(digits[:point])
		b.WriteByte('.')
		b.WriteString(digits[point:])
	default:
		b.WriteString("0.")
		for range -exp - len(digits) {
			b.WriteByte('0')
		}
		b.WriteString(digits)
	}
	return b.String(), nil
}

var errBigNumber = invalid("number exponent out of range")
