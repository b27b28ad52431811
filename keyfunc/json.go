package keyfunc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// defaultMaxBody is how much of a request body JSON reads at most.
const defaultMaxBody = 1 << 20

// JSON returns the key function of a field of a JSON request body, named by
// a dot-separated path such as "order.user_id"; a segment that is a number
// indexes an array ("items.0.sku"). The resource name is the path.
//
// It reads the body, at most 1 MiB (see JSONLimit), and puts
// it back so that the handler reads it in full. A larger body fails with
// ErrTooLarge; a body that is not valid JSON up to the field is invalid.
// Object keys match as encoding/json matches them to struct fields, without
// regard to case, and a key that matches twice ({"id":1,"ID":2}) is
// ambiguous, and invalid, because the handler might see the other one. The
// field must be a string, number or boolean (invalid otherwise); null
// counts as missing (ErrMissing). Numbers are written in one exact canonical form, so
// 42, 42.0, 4.2e1 and 420e-1 lock the same key, and 9007199254740993 not
// that of 9007199254740992; a number with an absurd exponent (1e999999999)
// is invalid (see the package documentation).
//
// Panics if path is empty or has an empty segment.
func JSON(path string) Func { return JSONLimit(path, defaultMaxBody) }

// JSONLimit is JSON with a body limit of maxBytes.
//
// Panics as JSON does, and if maxBytes is not positive.
func JSONLimit(path string, maxBytes int64) Func {
	checkName("JSON", path)
	segs := strings.Split(path, ".")
	for _, s := range segs {
		if s == "" {
			panic(fmt.Sprintf("routelock: keyfunc.JSON: path %q has an empty segment", path))
		}
	}
	if maxBytes <= 0 {
		panic("routelock: keyfunc.JSONLimit: limit must be positive")
	}
	return one(source{
		name: path,
		desc: "JSON(" + path + ")",
		http: func(r *http.Request) (string, error) {
			body, err := readBody(r, maxBytes)
			if err != nil {
				return "", err
			}
			return lookupJSON(body, segs)
		},
	})
}

// replayBody is a request body read ahead by a key function, given back to
// the handler. A second JSON key function on the same request reads data
// instead of the original body.
type replayBody struct {
	bytes.Reader
	data []byte
	orig io.ReadCloser
}

func (b *replayBody) Close() error { return b.orig.Close() }

func readBody(r *http.Request, limit int64) ([]byte, error) {
	if b, ok := r.Body.(*replayBody); ok {
		if int64(len(b.data)) > limit {
			return nil, ErrTooLarge
		}
		return b.data, nil
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, missing("no request body")
	}
	if r.ContentLength > limit {
		return nil, ErrTooLarge
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, ErrTooLarge
		}
		return nil, invalid("reading the request body failed")
	}
	if int64(len(data)) > limit {
		return nil, ErrTooLarge
	}
	rb := &replayBody{data: data, orig: r.Body}
	rb.Reset(data)
	r.Body = rb
	return data, nil
}

var (
	errMalformed = invalid("malformed JSON body")
	errNotScalar = invalid("not a string, number or boolean")
	errNull      = missing("null")
)

// lookupJSON finds the value at path segs in the JSON document data.
func lookupJSON(data []byte, segs []string) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return findJSON(dec, segs)
}

// findJSON reads one value from dec and returns the scalar at segs inside
// it. On success the value has been read to its end.
func findJSON(dec *json.Decoder, segs []string) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", errMalformed
	}
	if len(segs) == 0 {
		switch v := tok.(type) {
		case string:
			return v, nil
		case json.Number:
			return canonNumber(string(v))
		case bool:
			return strconv.FormatBool(v), nil
		case nil:
			return "", errNull
		}
		return "", errNotScalar
	}
	var val string
	found := false
	switch tok {
	case json.Delim('{'):
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return "", errMalformed
			}
			k, _ := kt.(string)
			if !strings.EqualFold(k, segs[0]) {
				if err := skipJSON(dec); err != nil {
					return "", err
				}
				continue
			}
			if found {
				return "", invalid("field %q given more than once", segs[0])
			}
			found = true
			if val, err = findJSON(dec, segs[1:]); err != nil {
				return "", err
			}
		}
	case json.Delim('['):
		idx, aerr := strconv.Atoi(segs[0])
		for i := 0; dec.More(); i++ {
			if aerr == nil && i == idx {
				found = true
				if val, err = findJSON(dec, segs[1:]); err != nil {
					return "", err
				}
				continue
			}
			if err := skipJSON(dec); err != nil {
				return "", err
			}
		}
	default:
		return "", errNotFound // a scalar where the path goes on
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return "", errMalformed
	}
	if !found {
		return "", errNotFound
	}
	return val, nil
}

// skipJSON reads one value from dec and throws it away.
func skipJSON(dec *json.Decoder) error {
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return errMalformed
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}
