package interceptor_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/routelock/lock/interceptor"
	"github.com/routelock/lock/internal/keylimit"
	"github.com/routelock/lock/internal/keyview"
	"github.com/routelock/lock/internal/shop"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
)

// kinds is a proto2 message (every scalar has presence) with a field of
// each kind that Field reads:
//
//	message Kinds {
//	  optional string s = 1; optional bytes b = 2; optional bool ok = 3;
//	  optional int32 i32 = 4; optional sint64 si64 = 5; optional uint64 u64 = 6;
//	  optional double f64 = 7; optional float f32 = 8; optional Color e = 9;
//	  optional google.protobuf.Int64Value w = 10; optional google.protobuf.StringValue sv = 11;
//	  optional Kinds sub = 12; repeated Kinds list = 13; repeated int64 ints = 14;
//	  optional google.protobuf.Struct st = 15;
//	}
//	enum Color { RED = 0; GREEN = 1; }
var kinds protoreflect.MessageDescriptor

func init() {
	f := func(name string, n int32, typ descriptorpb.FieldDescriptorProto_Type, label descriptorpb.FieldDescriptorProto_Label, ref string) *descriptorpb.FieldDescriptorProto {
		fd := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(n), Type: typ.Enum(), Label: label.Enum()}
		if ref != "" {
			fd.TypeName = proto.String(ref)
		}
		return fd
	}
	const opt, rep = descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL, descriptorpb.FieldDescriptorProto_LABEL_REPEATED
	fdp := &descriptorpb.FileDescriptorProto{
		Name:       proto.String("interceptor_kinds.proto"),
		Package:    proto.String("interceptortest"),
		Syntax:     proto.String("proto2"),
		Dependency: []string{"google/protobuf/wrappers.proto", "google/protobuf/struct.proto"},
		EnumType: []*descriptorpb.EnumDescriptorProto{{Name: proto.String("Color"), Value: []*descriptorpb.EnumValueDescriptorProto{
			{Name: proto.String("RED"), Number: proto.Int32(0)}, {Name: proto.String("GREEN"), Number: proto.Int32(1)},
		}}},
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Kinds"), Field: []*descriptorpb.FieldDescriptorProto{
			f("s", 1, descriptorpb.FieldDescriptorProto_TYPE_STRING, opt, ""),
			f("b", 2, descriptorpb.FieldDescriptorProto_TYPE_BYTES, opt, ""),
			f("ok", 3, descriptorpb.FieldDescriptorProto_TYPE_BOOL, opt, ""),
			f("i32", 4, descriptorpb.FieldDescriptorProto_TYPE_INT32, opt, ""),
			f("si64", 5, descriptorpb.FieldDescriptorProto_TYPE_SINT64, opt, ""),
			f("u64", 6, descriptorpb.FieldDescriptorProto_TYPE_UINT64, opt, ""),
			f("f64", 7, descriptorpb.FieldDescriptorProto_TYPE_DOUBLE, opt, ""),
			f("f32", 8, descriptorpb.FieldDescriptorProto_TYPE_FLOAT, opt, ""),
			f("e", 9, descriptorpb.FieldDescriptorProto_TYPE_ENUM, opt, ".interceptortest.Color"),
			f("w", 10, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, opt, ".google.protobuf.Int64Value"),
			f("sv", 11, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, opt, ".google.protobuf.StringValue"),
			f("sub", 12, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, opt, ".interceptortest.Kinds"),
			f("list", 13, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, rep, ".interceptortest.Kinds"),
			f("ints", 14, descriptorpb.FieldDescriptorProto_TYPE_INT64, rep, ""),
			f("st", 15, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, opt, ".google.protobuf.Struct"),
		}}},
	}
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		panic(err)
	}
	kinds = fd.Messages().ByName("Kinds")
}

// kind builds a Kinds message: set is called with a setter by field name.
func kind(set func(put func(name string, v any))) *dynamicpb.Message {
	m := dynamicpb.NewMessage(kinds)
	set(func(name string, v any) { putField(m, name, v) })
	return m
}

func putField(m *dynamicpb.Message, name string, v any) {
	fd := m.Descriptor().Fields().ByName(protoreflect.Name(name))
	switch v := v.(type) {
	case proto.Message:
		m.Set(fd, protoreflect.ValueOfMessage(v.ProtoReflect()))
	case []int64:
		l := m.Mutable(fd).List()
		for _, x := range v {
			l.Append(protoreflect.ValueOfInt64(x))
		}
	case []*dynamicpb.Message:
		l := m.Mutable(fd).List()
		for _, x := range v {
			l.Append(protoreflect.ValueOfMessage(x))
		}
	case protoreflect.EnumNumber:
		m.Set(fd, protoreflect.ValueOfEnum(v))
	default:
		m.Set(fd, protoreflect.ValueOf(v))
	}
}

func TestField(t *testing.T) {
	full := kind(func(put func(string, any)) {
		put("s", "abc")
		put("b", []byte("raw"))
		put("ok", false)
		put("i32", int32(0)) // proto2: zero that was set is a value
		put("si64", int64(-42))
		put("u64", uint64(math.MaxUint64))
		put("f64", 42.0)
		put("f32", float32(1.5))
		put("e", protoreflect.EnumNumber(1))
		put("w", wrapperspb.Int64(7))
		put("sv", wrapperspb.String(""))
		put("sub", kind(func(put func(string, any)) { put("s", "inner") }))
		put("list", []*dynamicpb.Message{kind(func(put func(string, any)) { put("s", "first") }), kind(func(put func(string, any)) { put("ok", true) })})
		put("ints", []int64{5, 6})
		put("st", &structpb.Struct{Fields: map[string]*structpb.Value{"a": structpb.NewStringValue("x")}})
	})
	ctx := context.Background()
	for _, tc := range []struct {
		path string
		msg  any
		want string // "" when an error is wanted
		err  error
	}{
		{"s", full, "abc", nil},
		{"b", full, "raw", nil},
		{"ok", full, "false", nil},
		{"i32", full, "0", nil},
		{"si64", full, "-42", nil},
		{"u64", full, "18446744073709551615", nil},
		{"f64", full, "42", nil}, // like JSON's 42.0: one form per value
		{"f32", full, "1.5", nil},
		{"e", full, "GREEN", nil},
		{"w", full, "7", nil},
		{"sv", full, "", keyfunc.ErrMissing}, // empty string
		{"sub.s", full, "inner", nil},
		{"list.0.s", full, "first", nil},
		{"list.1.ok", full, "true", nil},
		{"ints.1", full, "6", nil},

		{"nope", full, "", keyfunc.ErrSkip},
		{"sub.nope", full, "", keyfunc.ErrSkip},
		{"sub", full, "", errInvalid},       // a message
		{"st", full, "", errInvalid},        // a message, not a wrapper
		{"st.fields", full, "", errInvalid}, // a map
		{"list", full, "", errInvalid},      // repeated
		{"list.x.s", full, "", errInvalid},  // index that is not a number
		{"list.-1.s", full, "", errInvalid},
		{"list.9.s", full, "", keyfunc.ErrMissing},
		{"ints.2", full, "", keyfunc.ErrMissing},
		{"s.x", full, "", errInvalid}, // through a scalar
		{"ints.0.x", full, "", errInvalid},
		{"sub.sub.s", full, "", keyfunc.ErrMissing}, // unset message on the way
		{"u64", kind(func(func(string, any)) {}), "", keyfunc.ErrMissing},
		{"f64", kind(func(put func(string, any)) { put("f64", math.NaN()) }), "", errInvalid},
		{"f64", kind(func(put func(string, any)) { put("f64", math.Inf(1)) }), "", errInvalid},
		{"w", kind(func(put func(string, any)) { put("w", &wrapperspb.Int64Value{}) }), "0", nil},
		{"e", kind(func(put func(string, any)) { put("e", protoreflect.EnumNumber(9)) }), "9", nil},
		{"s", kind(func(put func(string, any)) { put("s", strings.Repeat("x", keylimit.PartLen+1)) }), "", errInvalid},

		// proto3 without presence: zero is "not sent".
		{"product_id", shop.Set(shop.New("ReserveRequest"), "product_id", int64(0)), "", keyfunc.ErrMissing},
		{"product_id", shop.Set(shop.New("ReserveRequest"), "product_id", int64(42)), "42", nil},
		{"order.user_id", shop.New("CreateOrderRequest"), "", keyfunc.ErrMissing},
		// Generated messages read the same way.
		{"value", wrapperspb.String("gen"), "gen", nil},
		{"value", (*wrapperspb.StringValue)(nil), "", keyfunc.ErrMissing},
		{"value", "not a message", "", errInvalid},
		{"value", nil, "", errInvalid},
	} {
		parts, err := interceptor.Field(tc.path).RPC(ctx, tc.msg)
		if tc.err != nil {
			wantErr(t, parts, err, tc.err)
			continue
		}
		wantParts(t, parts, err, tc.path, tc.want)
	}
}

func TestFieldIsRPCOnly(t *testing.T) {
	f, md := interceptor.Field("product_id"), interceptor.Metadata("x")
	v := keyview.Of[keyfunc.Func]()
	switch {
	case v.ForHTTP(f), !v.ForRPC(f), !v.ReadsMessage(f):
		t.Fatal("Field: ForHTTP/ForRPC/ReadsMessage wrong")
	case v.ReadsMessage(md), v.ForHTTP(md):
		t.Fatal("Metadata: ReadsMessage/ForHTTP wrong")
	case !v.ReadsMessage(keyfunc.Join(md, f)):
		t.Fatal("Join with a Field must read the message")
	}
	for _, p := range []string{"", "a..b", ".a", "a.", strings.Repeat("a", keylimit.PartLen+1)} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Field(%q) did not panic", p)
				}
			}()
			interceptor.Field(p)
		}()
	}
	for _, n := range []string{"", strings.Repeat("x", keylimit.PartLen+1)} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Metadata(%q) did not panic", n)
				}
			}()
			interceptor.Metadata(n)
		}()
	}
}

func TestMetadata(t *testing.T) {
	md := func(kv ...string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(kv...))
	}
	f := interceptor.Metadata("X-Tenant")
	parts, err := f.RPC(md("x-tenant", "t1"), nil)
	wantParts(t, parts, err, "x-tenant", "t1")
	parts, err = f.RPC(md("x-tenant", "t1", "x-tenant", "t2"), nil)
	wantErr(t, parts, err, errInvalid)
	parts, err = f.RPC(md("other", "1"), nil)
	wantErr(t, parts, err, keyfunc.ErrMissing)
	parts, err = f.RPC(context.Background(), nil)
	wantErr(t, parts, err, keyfunc.ErrMissing)
	parts, err = f.RPC(md("x-tenant", ""), nil)
	wantErr(t, parts, err, keyfunc.ErrMissing)
	parts, err = keyfunc.Join(f, interceptor.Field("product_id")).RPC(md("x-tenant", "t1"), shop.Set(shop.New("ReserveRequest"), "product_id", int64(3)))
	wantParts(t, parts, err, "x-tenant", "t1", "product_id", "3")

	// They compose with the key functions of package keyfunc.
	type userKey struct{}
	ctx := context.WithValue(md("x-tenant", "t1"), userKey{}, "u7")
	j := keyfunc.Join(keyfunc.Context("user", userKey{}), keyfunc.Join(f, interceptor.Field("product_id")).As("stock"))
	parts, err = j.RPC(ctx, shop.Set(shop.New("ReserveRequest"), "product_id", int64(3)))
	wantParts(t, parts, err, "user", "u7", "stock", "t1", "3")
	if got := j.String(); got != "Join(Context(user), Metadata(x-tenant), Field(product_id))" {
		t.Fatalf("String() = %q", got)
	}
}

// FuzzField decodes arbitrary bytes as a message and reads every path of a
// fixed set: Field must never panic, and what it returns must agree with
// the message's own reflection.
func FuzzField(f *testing.F) {
	seed := kind(func(put func(string, any)) {
		put("s", "abc")
		put("sub", kind(func(put func(string, any)) { put("i32", int32(5)) }))
		put("list", []*dynamicpb.Message{kind(func(put func(string, any)) { put("e", protoreflect.EnumNumber(1)) })})
		put("w", wrapperspb.Int64(7))
	})
	b, _ := proto.Marshal(seed)
	f.Add(b)
	f.Add([]byte{})
	paths := []string{"s", "b", "ok", "i32", "si64", "u64", "f64", "f32", "e", "w", "sv", "sub.s", "sub.i32",
		"list.0.e", "list.1.s", "ints.0", "st", "sub.sub.sub.s", "nope"}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, data []byte) {
		m := dynamicpb.NewMessage(kinds)
		if proto.Unmarshal(data, m) != nil {
			return
		}
		for _, p := range paths {
			parts, err := interceptor.Field(p).RPC(ctx, m)
			if err != nil {
				continue
			}
			if len(parts) != 2 || parts[0] != p || parts[1] == "" || len(parts[1]) > keylimit.PartLen {
				t.Fatalf("Field(%s) = %q", p, parts)
			}
			if p == "s" && parts[1] != m.Get(kinds.Fields().ByName("s")).String() {
				t.Fatalf("Field(s) = %q, message has %q", parts[1], m.Get(kinds.Fields().ByName("s")).String())
			}
		}
	})
}

// TestFieldPublic pins what the client is told when Field fails.
func TestFieldPublic(t *testing.T) {
	ctx := context.Background()
	full := kind(func(put func(string, any)) {
		put("list", []*dynamicpb.Message{kind(func(func(string, any)) {})})
		put("st", &structpb.Struct{})
		put("f64", math.NaN())
	})
	for _, tc := range []struct {
		path string
		msg  any
		want string
	}{
		{"nope", shop.New("ReserveRequest"), "Field(nope): no such field in shop.ReserveRequest"},
		{"order.nope", shop.Set(shop.New("CreateOrderRequest"), "order", shop.New("Order")), "Field(order.nope): no such field in shop.Order"},
		{"product_id", shop.New("ReserveRequest"), "Field(product_id): missing"},
		{"product_id.x", shop.Set(shop.New("ReserveRequest"), "product_id", int64(1)), "Field(product_id.x): path goes through a scalar"},
		{"order", shop.Set(shop.New("CreateOrderRequest"), "order", shop.New("Order")), "Field(order): not a scalar"},
		{"value", "not a message", "Field(value): request is not a protobuf message"},
		{"value", wrapperspb.String(""), "Field(value): missing"},
		{"s", kind(func(put func(string, any)) { put("s", "") }), "Field(s): empty"},
		{"list", full, "Field(list): repeated field"},
		{"list.x", full, "Field(list.x): repeated field indexed by a name"},
		{"list.1.s", full, "Field(list.1.s): not found"},
		{"ints.0.x", kind(func(put func(string, any)) { put("ints", []int64{1}) }), "Field(ints.0.x): path goes through a scalar"},
		{"st.fields", full, "Field(st.fields): map field"},
		{"f64", full, "Field(f64): not a finite number"},
	} {
		_, err := interceptor.Field(tc.path).RPC(ctx, tc.msg)
		if public(err) != tc.want {
			t.Errorf("Field(%s): error %v, want Public() %q", tc.path, err, tc.want)
		}
		if want := "routelock: " + tc.want; err.Error() != want {
			t.Errorf("Field(%s): Error() = %q, want %q", tc.path, err, want)
		}
	}
	_, err := interceptor.Metadata("x-tenant").RPC(metadata.NewIncomingContext(ctx, metadata.Pairs("x-tenant", "a", "x-tenant", "b")), nil)
	if want := "Metadata(x-tenant): given 2 times"; public(err) != want {
		t.Errorf("Metadata: error %v, want Public() %q", err, want)
	}
}

func wantParts(t *testing.T, got []string, err error, want ...string) {
	t.Helper()
	if err != nil {
		t.Fatalf("err = %v, want parts %q", err, want)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("parts = %q, want %q", got, want)
	}
}

// errInvalid stands, as wantErr's want, for a value stated wrongly: an
// error matching lockcore.ErrInvalidKey but not keyfunc.ErrMissing.
var errInvalid = errors.New("invalid")

// public returns what err tells the client, "" if it says nothing.
func public(err error) string {
	var p interface{ Public() string }
	if errors.As(err, &p) {
		return p.Public()
	}
	return ""
}

func wantErr(t *testing.T, got []string, err, want error) {
	t.Helper()
	ok := errors.Is(err, want)
	if want == errInvalid {
		ok = errors.Is(err, lockcore.ErrInvalidKey) && !errors.Is(err, keyfunc.ErrMissing)
	}
	if !ok {
		t.Fatalf("err = %v (parts %q), want %v", err, got, want)
	}
	if want != keyfunc.ErrSkip {
		if src, _, _ := strings.Cut(public(err), ": "); src == "" || src == public(err) {
			t.Fatalf("err = %#v, want a Public() naming its source", err)
		}
	}
}

// BenchmarkField measures one evaluation of Field: a top-level and a nested
// field of a dynamic message, a field of a generated one, and the errors of
// a field the message does not have and of one that is not set.
func BenchmarkField(b *testing.B) {
	ctx := context.Background()
	for _, bc := range []struct {
		name, path string
		msg        any
		err        error
	}{
		{"product_id", "product_id", shop.Set(shop.New("ReserveRequest"), "product_id", int64(42)), nil},
		{"order.user_id", "order.user_id", shop.Set(shop.New("CreateOrderRequest"), "order", shop.Set(shop.New("Order"), "user_id", "u7")), nil},
		{"generated", "value", wrapperspb.String("gen"), nil},
		{"skip", "nope", shop.New("ReserveRequest"), keyfunc.ErrSkip},
		{"missing", "product_id", shop.New("ReserveRequest"), keyfunc.ErrMissing},
	} {
		f := interceptor.Field(bc.path)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := f.RPC(ctx, bc.msg); !errors.Is(err, bc.err) {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMetadata measures one evaluation of Metadata.
func BenchmarkMetadata(b *testing.B) {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-tenant", "t1"))
	f := interceptor.Metadata("x-tenant")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.RPC(ctx, nil); err != nil {
			b.Fatal(err)
		}
	}
}
