package keyfunc

import (
	"context"
	"strconv"
	"strings"

	"github.com/routelock/lock/internal/rpckey"
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
// stream's first message. It reads them through package
// github.com/routelock/lock/interceptor, which every gRPC server using the
// interceptors links; in a program that does not link it, every call fails
// with ErrInvalid.
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
	return one(source{
		name:    path,
		desc:    "Field(" + path + ")",
		message: true,
		rpc: func(_ context.Context, req any) (string, error) {
			read := rpckey.Field
			if read == nil {
				return "", errNoReader
			}
			v, fail := read(req, segs)
			if fail.Kind != rpckey.OK {
				return "", readError(fail)
			}
			return v, nil
		},
	})
}

// errNoReader is the error of Field and Metadata in a program that does not
// link the reader of gRPC calls (package internal/protoread, imported by
// package interceptor).
var errNoReader error = &detail{ErrInvalid, "reads gRPC calls through package github.com/routelock/lock/interceptor, which this program does not link"}

// readError turns the failure of a read of a gRPC call into an error of
// this package. The common messages reuse the package's errors, so that
// they allocate nothing.
func readError(f rpckey.Fail) error {
	switch f.Kind {
	case rpckey.Skip:
		return &detail{ErrSkip, f.Msg}
	case rpckey.Missing:
		switch f.Msg {
		case rpckey.MsgMissing:
			return errMissing
		case rpckey.MsgNotFound:
			return errNotFound
		}
		return &detail{ErrMissing, f.Msg}
	}
	return &detail{ErrInvalid, f.Msg}
}

// Metadata returns the key function of gRPC request metadata entry name
// (the gRPC counterpart of Header), such as "x-tenant-id". The name is
// lower-cased, as gRPC stores it, and is the resource name. An entry given
// more than once is ambiguous and fails with ErrInvalid.
//
// Metadata reads gRPC calls only; for a stream it is available before the
// first message, so the lock is taken before the handler runs. Like Field,
// it reads them through package github.com/routelock/lock/interceptor, and
// fails every call with ErrInvalid in a program that does not link it.
//
// Panics if name is empty or longer than lockcore.MaxKeyPartLen bytes.
func Metadata(name string) Func {
	checkName("Metadata", name)
	name = strings.ToLower(name)
	return one(source{
		name: name,
		desc: "Metadata(" + name + ")",
		rpc: func(ctx context.Context, _ any) (string, error) {
			read := rpckey.Metadata
			if read == nil {
				return "", errNoReader
			}
			return single(read(ctx, name))
		},
	})
}
