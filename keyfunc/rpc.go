package keyfunc

import (
	"context"
	"math"
	"strconv"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Field returns the key function of a field of a gRPC request message,
// named by its path of protobuf field names: "product_id", or
// "order.user_id" for a field of a nested message; a number indexes a
// repeated field ("items.0.sku"). It reads any proto.Message through
// protobuf reflection, so it needs no generated code of its own. The
// resource name is the path.
//
// A field that the message type does not have fails with ErrSkip: the
// method does not name this resource. A field that is not set fails with
// ErrMissing, and so does a field without presence (a proto3 scalar not
// marked optional) that holds its zero value, because protobuf cannot tell
// 0 or "" from "not sent"; mark the field optional, or make it a wrapper
// such as google.protobuf.Int64Value, if zero is a valid value. The
// field must be a string, bytes, bool, number or enum, or a
// wrapper of one (google.protobuf.StringValue and the like); anything else
// fails with ErrInvalid. Integers are written in decimal, so product_id 42
// locks the same key as the JSON body {"product_id": 42}; enums by the
// name of their value.
//
// Field reads gRPC calls only. For a stream, the key comes from the
// stream's first message.
//
// Panics if path is empty or has an empty segment.
func Field(path string) Func {
	checkName("Field", path)
	segs := strings.Split(path, ".")
	for _, s := range segs {
		if s == "" {
			panic("keyfunc: Field(" + strconv.Quote(path) + "): empty segment")
		}
	}
	names := make([]protoreflect.Name, len(segs))
	for i, s := range segs {
		names[i] = protoreflect.Name(s)
	}
	return one(source{
		name:    path,
		desc:    "Field(" + path + ")",
		message: true,
		rpc: func(_ context.Context, req any) (string, error) {
			m, ok := req.(proto.Message)
			if !ok || req == nil {
				return "", invalid("request is not a protobuf message")
			}
			return field(m.ProtoReflect(), names)
		},
	})
}

// field follows path through m to a scalar and formats it.
func field(m protoreflect.Message, path []protoreflect.Name) (string, error) {
	for i := 0; ; i++ {
		fd := m.Descriptor().Fields().ByName(path[i])
		if fd == nil {
			return "", &detail{ErrSkip, "no such field in " + string(m.Descriptor().FullName())}
		}
		last := i == len(path)-1
		switch {
		case fd.IsMap():
			return "", invalid("map field")
		case fd.IsList():
			if last {
				return "", invalid("repeated field")
			}
			idx, err := strconv.Atoi(string(path[i+1]))
			if err != nil || idx < 0 {
				return "", invalid("repeated field indexed by a name")
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
				return "", invalid("path goes through a scalar")
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
			return "", invalid("path goes through a scalar")
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
			return "", invalid("not a finite number")
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
	return "", invalid("not a scalar")
}

// Metadata returns the key function of gRPC request metadata entry name
// (the gRPC counterpart of Header), such as "x-tenant-id". The name is
// lower-cased, as gRPC stores it, and is the resource name. An entry given
// more than once is ambiguous and fails with ErrInvalid.
//
// Metadata reads gRPC calls only; for a stream it is available before the
// first message, so the lock is taken before the handler runs.
//
// Panics if name is empty or longer than MaxLen.
func Metadata(name string) Func {
	checkName("Metadata", name)
	name = strings.ToLower(name)
	return one(source{
		name: name,
		desc: "Metadata(" + name + ")",
		rpc: func(ctx context.Context, _ any) (string, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			return single(md[name])
		},
	})
}
