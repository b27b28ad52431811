package interceptor

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/routelock/lock/internal/keylimit"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
)

// Field returns the key function of a field of a gRPC request message,
// named by its path of protobuf field names: "product_id", or
// "order.user_id" for a field of a nested message; a number indexes a
// repeated field ("items.0.sku"). It reads any proto.Message through
// protobuf reflection, so it needs no generated code of its own. The
// resource name is the path. It combines with the other key functions
// through keyfunc.Join and keyfunc.Func.As like any of them.
//
// A field that the message type does not have fails with keyfunc.ErrSkip:
// the method does not name this resource. A field that is not set fails
// with keyfunc.ErrMissing, and so does a field without presence (a proto3
// scalar not marked optional) that holds its zero value, because protobuf
// cannot tell 0 or "" from "not sent"; mark the field optional, or make it
// a wrapper such as google.protobuf.Int64Value, if zero is a valid value.
// The field must be a string, bytes, bool, number or enum, or a wrapper of
// one (google.protobuf.StringValue and the like); anything else is invalid
// (lockcore.ErrInvalidKey). Integers are written in decimal, so product_id 42
// locks the same key as the JSON body {"product_id": 42}; enums by the
// name of their value.
//
// Field reads gRPC calls only. For a stream, the key comes from the
// stream's first message.
//
// Panics if path is empty, longer than 256 bytes or has an empty
// segment.
func Field(path string) keyfunc.Func {
	checkName("Field", path)
	segs := strings.Split(path, ".")
	for _, s := range segs {
		if s == "" {
			panic("routelock: interceptor.Field(" + strconv.Quote(path) + "): empty segment")
		}
	}
	return keyfunc.Custom(keyfunc.Source{
		Name: path,
		Desc: "Field(" + path + ")",
		RPC: func(_ context.Context, req any) (string, error) {
			m, ok := req.(proto.Message)
			if !ok || req == nil {
				return "", errNotMessage
			}
			return field(m.ProtoReflect(), segs)
		},
		Check: func(req any) error {
			m, ok := req.(proto.Message)
			if !ok || req == nil {
				return errNotMessage
			}
			return checkPath(m.ProtoReflect().Descriptor(), segs)
		},
	})
}

// checkPath returns nil when field can read path in messages of type md,
// and otherwise what stops it, in every message of the type: a field the
// type does not have, or a path to something that is not a scalar. It
// follows field's steps on the descriptors alone.
func checkPath(md protoreflect.MessageDescriptor, path []string) error {
	for i := 0; ; i++ {
		fd := md.Fields().ByName(protoreflect.Name(path[i]))
		if fd == nil {
			return fmt.Errorf("%s has no field %s", md.FullName(), path[i])
		}
		last := i == len(path)-1
		switch {
		case fd.IsMap():
			return fmt.Errorf("%s.%s is a map field", md.FullName(), fd.Name())
		case fd.IsList():
			if last {
				return fmt.Errorf("%s.%s is a repeated field: index it", md.FullName(), fd.Name())
			}
			if idx, err := strconv.Atoi(path[i+1]); err != nil || idx < 0 {
				return fmt.Errorf("%s.%s is a repeated field indexed by a name", md.FullName(), fd.Name())
			}
			i++
			last = i == len(path)-1
		}
		if last {
			if !scalarKind(fd) {
				return fmt.Errorf("%s.%s is not a scalar", md.FullName(), fd.Name())
			}
			return nil
		}
		if fd.Message() == nil {
			return fmt.Errorf("%s.%s is a scalar, and the path goes on through it", md.FullName(), fd.Name())
		}
		md = fd.Message()
	}
}

// scalarKind reports whether scalar can format a value of field fd.
func scalarKind(fd protoreflect.FieldDescriptor) bool {
	if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
		return true
	}
	m := fd.Message()
	if !strings.HasPrefix(string(m.FullName()), "google.protobuf.") || !strings.HasSuffix(string(m.Name()), "Value") {
		return false
	}
	vfd := m.Fields().ByName("value")
	return vfd != nil && !vfd.IsList() && !vfd.IsMap() && vfd.Message() == nil
}

// Metadata returns the key function of gRPC request metadata entry name
// (the gRPC counterpart of keyfunc.Header), such as "x-tenant-id". The
// name is lower-cased, as gRPC stores it, and is the resource name. An
// entry given more than once is ambiguous: invalid (lockcore.ErrInvalidKey).
//
// Metadata reads gRPC calls only; for a stream it is available before the
// first message, so the lock is taken before the handler runs.
//
// Panics if name is empty or longer than 256 bytes.
func Metadata(name string) keyfunc.Func {
	checkName("Metadata", name)
	name = strings.ToLower(name)
	return keyfunc.Custom(keyfunc.Source{
		Name:          name,
		Desc:          "Metadata(" + name + ")",
		BeforeMessage: true,
		RPC: func(ctx context.Context, _ any) (string, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			switch vs := md[name]; len(vs) {
			case 0:
				return "", errMissing
			case 1:
				return vs[0], nil
			default:
				return "", invalid(fmt.Sprintf("given %d times", len(vs)))
			}
		},
	})
}

// checkName panics unless name is usable as the resource name of key
// function fn.
func checkName(fn, name string) {
	if name == "" {
		panic("routelock: interceptor." + fn + ": empty name")
	}
	if len(name) > keylimit.PartLen {
		panic(fmt.Sprintf("routelock: interceptor.%s: name longer than %d bytes", fn, keylimit.PartLen))
	}
}

// keyError is an error of Field or Metadata: a sentinel (lockcore's, or
// keyfunc.ErrMissing or keyfunc.ErrSkip) and words for the client, which
// never repeat the request's value. The error of the key function that
// wraps it tells the client what Public returns.
type keyError struct {
	sentinel error
	msg      string
}

func (e *keyError) Error() string  { return e.msg }
func (e *keyError) Unwrap() error  { return e.sentinel }
func (e *keyError) Public() string { return e.msg }

func invalid(msg string) error { return &keyError{lockcore.ErrInvalidKey, msg} }

// The errors with constant messages, made once so that reporting them
// allocates nothing.
var (
	errMissing       error = &keyError{keyfunc.ErrMissing, "missing"}
	errNotFound      error = &keyError{keyfunc.ErrMissing, "not found"}
	errNotMessage          = invalid("request is not a protobuf message")
	errMap                 = invalid("map field")
	errRepeated            = invalid("repeated field")
	errIndexByName         = invalid("repeated field indexed by a name")
	errThroughScalar       = invalid("path goes through a scalar")
	errNotFinite           = invalid("not a finite number")
	errNotScalar           = invalid("not a scalar")
)

// field follows path through m to a scalar and formats it. The segments of
// path are protobuf field names, and indexes after a repeated field;
// converting one to a protoreflect.Name costs nothing.
func field(m protoreflect.Message, path []string) (string, error) {
	for i := 0; ; i++ {
		fd := m.Descriptor().Fields().ByName(protoreflect.Name(path[i]))
		if fd == nil {
			return "", &keyError{keyfunc.ErrSkip, "no such field in " + string(m.Descriptor().FullName())}
		}
		last := i == len(path)-1
		switch {
		case fd.IsMap():
			return "", errMap
		case fd.IsList():
			if last {
				return "", errRepeated
			}
			idx, err := strconv.Atoi(path[i+1])
			if err != nil || idx < 0 {
				return "", errIndexByName
			}
			list := m.Get(fd).List()
			if idx >= list.Len() {
				return "", errNotFound
			}
			v := list.Get(idx)
			i++
			if i == len(path)-1 {
				return scalar(fd, v)
			}
			if fd.Message() == nil {
				return "", errThroughScalar
			}
			m = v.Message()
			continue
		}
		if !m.Has(fd) {
			return "", errMissing
		}
		if last {
			return scalar(fd, m.Get(fd))
		}
		if fd.Message() == nil {
			return "", errThroughScalar
		}
		m = m.Get(fd).Message()
	}
}

// scalar formats the value v of field fd.
func scalar(fd protoreflect.FieldDescriptor, v protoreflect.Value) (string, error) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return v.String(), nil
	case protoreflect.BytesKind:
		return string(v.Bytes()), nil
	case protoreflect.BoolKind:
		return strconv.FormatBool(v.Bool()), nil
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return strconv.FormatInt(v.Int(), 10), nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return strconv.FormatUint(v.Uint(), 10), nil
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return "", errNotFinite
		}
		if f == math.Trunc(f) && f >= -(1<<63) && f < 1<<63 {
			return strconv.FormatInt(int64(f), 10), nil
		}
		return strconv.FormatFloat(f, 'g', -1, 64), nil
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name()), nil
		}
		return strconv.FormatInt(int64(v.Enum()), 10), nil
	case protoreflect.MessageKind:
		// google.protobuf.StringValue and its kin hold one field, "value",
		// without presence: a wrapper that is set holds its value, zero too.
		m := v.Message()
		if strings.HasPrefix(string(m.Descriptor().FullName()), "google.protobuf.") &&
			strings.HasSuffix(string(m.Descriptor().Name()), "Value") {
			if vfd := m.Descriptor().Fields().ByName("value"); vfd != nil && !vfd.IsList() && !vfd.IsMap() && vfd.Message() == nil {
				return scalar(vfd, m.Get(vfd))
			}
		}
	}
	return "", errNotScalar
}
