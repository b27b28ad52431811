// Package shop is a small gRPC service for routelock's tests and examples,
// defined without protoc: the file descriptor of shop.proto below is built
// in Go and registered with the global registry (so server reflection and
// grpcurl see it), and its messages are dynamicpb messages.
//
//	syntax = "proto3";
//	package shop;
//	message ReserveRequest { int64 product_id = 1; int32 quantity = 2; }
//	message ReserveReply { int64 left = 1; int64 fence = 2; }
//	message Order { string user_id = 1; int64 product_id = 2; }
//	message CreateOrderRequest { Order order = 1; }
//	message CreateOrderReply { string order_id = 1; int64 fence = 2; }
//	service Inventory {
//	  rpc Reserve(ReserveRequest) returns (ReserveReply);
//	  rpc Restock(stream ReserveRequest) returns (ReserveReply);
//	}
//	service Orders {
//	  rpc Create(CreateOrderRequest) returns (CreateOrderReply);
//	}
package shop

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// Full method names.
const (
	Reserve = "/shop.Inventory/Reserve"
	Restock = "/shop.Inventory/Restock"
	Create  = "/shop.Orders/Create"
)

// File is the descriptor of shop.proto.
var File protoreflect.FileDescriptor

func init() {
	field := func(name string, num int32, typ descriptorpb.FieldDescriptorProto_Type, msg string) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{
			Name:     proto.String(name),
			Number:   proto.Int32(num),
			Label:    descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
			Type:     typ.Enum(),
			JsonName: proto.String(jsonName(name)),
		}
		if msg != "" {
			f.TypeName = proto.String(".shop." + msg)
		}
		return f
	}
	msg := func(name string, fields ...*descriptorpb.FieldDescriptorProto) *descriptorpb.DescriptorProto {
		return &descriptorpb.DescriptorProto{Name: proto.String(name), Field: fields}
	}
	method := func(name, in, out string, clientStream bool) *descriptorpb.MethodDescriptorProto {
		return &descriptorpb.MethodDescriptorProto{
			Name: proto.String(name), InputType: proto.String(".shop." + in), OutputType: proto.String(".shop." + out),
			ClientStreaming: proto.Bool(clientStream),
		}
	}
	const (
		i64 = descriptorpb.FieldDescriptorProto_TYPE_INT64
		i32 = descriptorpb.FieldDescriptorProto_TYPE_INT32
		str = descriptorpb.FieldDescriptorProto_TYPE_STRING
		sub = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE
	)
	fdp := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("shop.proto"),
		Package: proto.String("shop"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			msg("ReserveRequest", field("product_id", 1, i64, ""), field("quantity", 2, i32, "")),
			msg("ReserveReply", field("left", 1, i64, ""), field("fence", 2, i64, "")),
			msg("Order", field("user_id", 1, str, ""), field("product_id", 2, i64, "")),
			msg("CreateOrderRequest", field("order", 1, sub, "Order")),
			msg("CreateOrderReply", field("order_id", 1, str, ""), field("fence", 2, i64, "")),
		},
		Service: []*descriptorpb.ServiceDescriptorProto{
			{Name: proto.String("Inventory"), Method: []*descriptorpb.MethodDescriptorProto{
				method("Reserve", "ReserveRequest", "ReserveReply", false),
				method("Restock", "ReserveRequest", "ReserveReply", true),
			}},
			{Name: proto.String("Orders"), Method: []*descriptorpb.MethodDescriptorProto{
				method("Create", "CreateOrderRequest", "CreateOrderReply", false),
			}},
		},
	}
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		panic(err)
	}
	if err := protoregistry.GlobalFiles.RegisterFile(fd); err != nil {
		panic(err)
	}
	File = fd
}

func jsonName(s string) string {
	b := make([]byte, 0, len(s))
	up := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '_':
			up = true
		case up && 'a' <= c && c <= 'z':
			b = append(b, c-'a'+'A')
			up = false
		default:
			b = append(b, c)
			up = false
		}
	}
	return string(b)
}

// New returns an empty message of type name, such as "ReserveRequest".
func New(name string) *dynamicpb.Message {
	md := File.Messages().ByName(protoreflect.Name(name))
	if md == nil {
		panic("shop: no message " + name)
	}
	return dynamicpb.NewMessage(md)
}

// Set sets the fields of m by name (int64, int32 or string values, or a
// message) and returns m.
func Set(m *dynamicpb.Message, kv ...any) *dynamicpb.Message {
	for i := 0; i+1 < len(kv); i += 2 {
		fd := m.Descriptor().Fields().ByName(protoreflect.Name(kv[i].(string)))
		if fd == nil {
			panic("shop: no field " + kv[i].(string))
		}
		switch v := kv[i+1].(type) {
		case int64:
			m.Set(fd, protoreflect.ValueOfInt64(v))
		case int32:
			m.Set(fd, protoreflect.ValueOfInt32(v))
		case string:
			m.Set(fd, protoreflect.ValueOfString(v))
		case *dynamicpb.Message:
			m.Set(fd, protoreflect.ValueOfMessage(v))
		default:
			panic("shop: unsupported value")
		}
	}
	return m
}

// Int returns the integer field name of m.
func Int(m proto.Message, name string) int64 {
	r := m.ProtoReflect()
	return r.Get(r.Descriptor().Fields().ByName(protoreflect.Name(name))).Int()
}

// String returns the string field name of m.
func String(m proto.Message, name string) string {
	r := m.ProtoReflect()
	return r.Get(r.Descriptor().Fields().ByName(protoreflect.Name(name))).String()
}

// Server implements the shop's methods. A nil method answers
// codes.Unimplemented.
type Server struct {
	Reserve func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error)
	Restock func(stream grpc.ServerStream) error
	Create  func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error)
}

// Register registers both services of s with r.
func Register(r grpc.ServiceRegistrar, s *Server) {
	unary := func(full, in string, fn func(*Server) func(context.Context, *dynamicpb.Message) (*dynamicpb.Message, error)) grpc.MethodDesc {
		return grpc.MethodDesc{
			MethodName: full[strings.LastIndexByte(full, '/')+1:],
			Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				req := New(in)
				if err := dec(req); err != nil {
					return nil, err
				}
				h := func(ctx context.Context, req any) (any, error) {
					f := fn(srv.(*Server))
					if f == nil {
						return nil, errUnimplemented(full)
					}
					reply, err := f(ctx, req.(*dynamicpb.Message))
					if err != nil {
						return nil, err
					}
					if reply == nil {
						return nil, status.Error(codes.Internal, "shop: "+full+" returned no reply")
					}
					return reply, nil
				}
				if ic == nil {
					return h(ctx, req)
				}
				return ic(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: full}, h)
			},
		}
	}
	r.RegisterService(&grpc.ServiceDesc{
		ServiceName: "shop.Inventory",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{unary(Reserve, "ReserveRequest", func(s *Server) func(context.Context, *dynamicpb.Message) (*dynamicpb.Message, error) {
			return s.Reserve
		})},
		Streams: []grpc.StreamDesc{{
			StreamName:    "Restock",
			ClientStreams: true,
			Handler: func(srv any, stream grpc.ServerStream) error {
				if srv.(*Server).Restock == nil {
					return errUnimplemented(Restock)
				}
				return srv.(*Server).Restock(stream)
			},
		}},
		Metadata: "shop.proto",
	}, s)
	r.RegisterService(&grpc.ServiceDesc{
		ServiceName: "shop.Orders",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{unary(Create, "CreateOrderRequest", func(s *Server) func(context.Context, *dynamicpb.Message) (*dynamicpb.Message, error) {
			return s.Create
		})},
		Metadata: "shop.proto",
	}, s)
}

// RestockDesc describes the Restock stream for grpc.ClientConn.NewStream.
var RestockDesc = &grpc.StreamDesc{StreamName: "Restock", ClientStreams: true}

func errUnimplemented(method string) error {
	return status.Error(codes.Unimplemented, "shop: "+method+" not implemented")
}
