// Package protoread reads gRPC calls for package keyfunc: the fields of
// request messages through protobuf reflection, and incoming metadata. Its
// init function sets the hooks of package rpckey, through which
// keyfunc.Field and keyfunc.Metadata call it; importing it for its side
// effect is all a program needs, and package interceptor does.
//
// It imports protobuf and gRPC so that keyfunc does not; it must not import
// keyfunc, whose tests import it.
package protoread

import (
	"context"
	"math"
	"strconv"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/routelock/lock/internal/rpckey"
)

func init() {
	rpckey.Field = Field
	rpckey.Metadata = Metadata
}

// Field reads the field at path of the request message req, as
// rpckey.Field documents: req must be a proto.Message.
func Field(req any, path []string) (string, rpckey.Fail) {
	m, ok := req.(proto.Message)
	if !ok || req == nil {
		return "", invalid("request is not a protobuf message")
	}
	return field(m.ProtoReflect(), path)
}

// Metadata returns the values of the incoming metadata entry name of the
// call whose context is ctx, as rpckey.Metadata documents.
func Metadata(ctx context.Context, name string) []string {
	md, _ := metadata.FromIncomingContext(ctx)
	return md[name]
}

func invalid(msg string) rpckey.Fail { return rpckey.Fail{Kind: rpckey.Invalid, Msg: msg} }

var (
	missing  = rpckey.Fail{Kind: rpckey.Missing, Msg: rpckey.MsgMissing}
	notFound = rpckey.Fail{Kind: rpckey.Missing, Msg: rpckey.MsgNotFound}
)

// field follows path through m to a scalar and formats it. The segments of
// path are protobuf field names, and indexes after a repeated field;
// converting one to a protoreflect.Name costs nothing.
func field(m protoreflect.Message, path []string) (string, rpckey.Fail) {
	for i := 0; ; i++ {
		fd := m.Descriptor().Fields().ByName(protoreflect.Name(path[i]))
		if fd == nil {
			return "", rpckey.Fail{Kind: rpckey.Skip, Msg: "no such field in " + string(m.Descriptor().FullName())}
		}
		last := i == len(path)-1
		switch {
		case fd.IsMap():
			return "", invalid("map field")
		case fd.IsList():
			if last {
				return "", invalid("repeated field")
			}
			idx, err := strconv.Atoi(path[i+1])
			if err != nil || idx < 0 {
				return "", invalid("repeated field indexed by a name")
			}
			list := m.Get(fd).List()
			if idx >= list.Len() {
				return "", notFound
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
			return "", missing
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
func scalar(fd protoreflect.FieldDescriptor, v protoreflect.Value) (string, rpckey.Fail) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return v.String(), rpckey.Fail{}
	case protoreflect.BytesKind:
		return string(v.Bytes()), rpckey.Fail{}
	case protoreflect.BoolKind:
		return strconv.FormatBool(v.Bool()), rpckey.Fail{}
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return strconv.FormatInt(v.Int(), 10), rpckey.Fail{}
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return strconv.FormatUint(v.Uint(), 10), rpckey.Fail{}
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return "", invalid("not a finite number")
		}
		if f == math.Trunc(f) && f >= -(1<<63) && f < 1<<63 {
			return strconv.FormatInt(int64(f), 10), rpckey.Fail{}
		}
		return strconv.FormatFloat(f, 'g', -1, 64), rpckey.Fail{}
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name()), rpckey.Fail{}
		}
		return strconv.FormatInt(int64(v.Enum()), 10), rpckey.Fail{}
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
