// Package idem is what the HTTP middleware and the gRPC interceptors share
// for idempotency keys: the key a client sends, the lock key it is looked
// up by, and the stored result's format. It links lockcore and the
// standard library only.
package idem

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/routelock/lock/lockcore"
)

// MaxKey is the longest idempotency key a client may send, in bytes.
const MaxKey = 255

// ParseKey returns the idempotency key of a field's values vs: one value,
// a Structured Field string ("...", with \" and \\ escapes) or a bare run
// of visible ASCII characters, of 1 to MaxKey characters.
func ParseKey(vs []string) (string, bool) {
	if len(vs) != 1 {
		return "", false
	}
	v := strings.Trim(vs[0], " \t")
	if len(v) >= 2 && v[0] == '"' {
		var b strings.Builder
		for i := 1; i < len(v); i++ {
			switch c := v[i]; {
			case c == '\\':
				i++
				if i == len(v) || v[i] != '"' && v[i] != '\\' {
					return "", false
				}
				b.WriteByte(v[i])
			case c == '"':
				if i != len(v)-1 {
					return "", false
				}
				k := b.String()
				return k, k != "" && len(k) <= MaxKey
			case c < 0x20 || c > 0x7e:
				return "", false
			default:
				b.WriteByte(c)
			}
		}
		return "", false // unterminated
	}
	if v == "" || len(v) > MaxKey {
		return "", false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return "", false
		}
	}
	return v, true
}

// LockKey returns the lock key that the idempotency key ik is looked up
// by: what the server knows and the client cannot forge (the operation,
// such as an HTTP method and route template or a gRPC method's full name,
// and the caller's identity, "" for none), and a digest of ik, which keeps
// the client's string out of the backend and its listings.
func LockKey(op []string, caller, ik string) (lockcore.Key, error) {
	parts := make([]string, 0, len(op)+3)
	parts = append(parts, "idempotency")
	for _, p := range op {
		parts = append(parts, bounded(p))
	}
	if caller == "" {
		parts = append(parts, "~")
	} else {
		parts = append(parts, bounded("="+caller))
	}
	d := sha256.Sum256([]byte(ik))
	return lockcore.NewKey(append(parts, hex.EncodeToString(d[:16]))...)
}

// bounded returns s, or a digest of it when it is too long for a key part.
func bounded(s string) string {
	if len(s) <= 200 && s != "" {
		return s
	}
	d := sha256.Sum256([]byte(s))
	return "#" + hex.EncodeToString(d[:])
}

// Record is a stored result: the request's fingerprint (a SHA-256
// digest), the status it was answered with (an HTTP status, or a gRPC
// code), and either the response (fields and body) or, when it was not
// stored, why (Reason) and how large its body was (Size).
type Record struct {
	Fingerprint [sha256.Size]byte
	Status      int
	Reason      string // "" when the response is stored
	Size        int64
	Fields      [][2]string // name and value, in order
	Body        []byte
}

// A stored result is "RLI1", the fingerprint, the status (uvarint), the
// reason and the size, the fields (a count, then name and value pairs)
// and the body. Strings are a uvarint length and the bytes.
const magic = "RLI1"

// Encode returns r as it is stored.
func (r *Record) Encode() []byte {
	n := len(magic) + len(r.Fingerprint) + len(r.Reason) + len(r.Body) + 32
	for _, f := range r.Fields {
		n += len(f[0]) + len(f[1]) + 8
	}
	b := make([]byte, 0, n)
	b = append(b, magic...)
	b = append(b, r.Fingerprint[:]...)
	b = binary.AppendUvarint(b, uint64(r.Status))
	b = appendString(b, r.Reason)
	b = binary.AppendUvarint(b, uint64(r.Size))
	b = binary.AppendUvarint(b, uint64(len(r.Fields)))
	for _, f := range r.Fields {
		b = appendString(b, f[0])
		b = appendString(b, f[1])
	}
	return append(b, r.Body...)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// ErrRecord is the error of a stored result that Encode did not make.
var ErrRecord = errors.New("routelock: unreadable stored result")

// Decode returns the Record that Encode made b of.
func Decode(b []byte) (Record, error) {
	var r Record
	if !bytes.HasPrefix(b, []byte(magic)) || len(b) < len(magic)+sha256.Size {
		return r, ErrRecord
	}
	b = b[len(magic):]
	copy(r.Fingerprint[:], b)
	b = b[sha256.Size:]
	bad := false
	uv := func() uint64 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			bad = true
			return 0
		}
		b = b[n:]
		return v
	}
	str := func() string {
		n := uv()
		if bad || n > uint64(len(b)) {
			bad = true
			return ""
		}
		s := string(b[:n])
		b = b[n:]
		return s
	}
	status := uv()
	r.Reason = str()
	r.Size = int64(uv())
	fields := uv()
	if bad || fields > uint64(len(b)) || status > 1<<16 {
		return Record{}, ErrRecord
	}
	r.Status = int(status)
	r.Fields = make([][2]string, 0, fields)
	for range fields {
		k := str()
		v := str()
		if bad {
			return Record{}, ErrRecord
		}
		r.Fields = append(r.Fields, [2]string{k, v})
	}
	r.Body = b
	return r, nil
}
