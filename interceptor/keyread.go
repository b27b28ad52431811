package interceptor

// keyfunc.Field and keyfunc.Metadata read gRPC calls through hooks that
// package protoread sets when it is linked, so that package keyfunc imports
// no gRPC and no protobuf and HTTP-only programs link neither. Every gRPC
// server that uses this module links this package, so importing protoread
// here is how its key functions get their reader.
import _ "github.com/routelock/lock/internal/protoread"
