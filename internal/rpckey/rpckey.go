// Package rpckey holds the hooks through which package keyfunc reads gRPC
// calls, so that keyfunc itself imports no gRPC and no protobuf: a program
// that locks only HTTP routes links neither. Package protoread sets the
// hooks in its init function, and package interceptor imports protoread, so
// every program that serves gRPC with this module has them set. The
// precedent is crypto.RegisterHash: crypto.SHA256.New works only when
// crypto/sha256 is linked.
//
// The hooks are set once, before main runs, and only read afterwards; tests
// that replace one must restore it and must not run in parallel with others
// that read it.
//
// This package imports only the standard library.
package rpckey

import "context"

// Field reads the field at path, a list of protobuf field names and
// repeated-field indexes such as ["items", "0", "sku"], of the request
// message req, and formats it as keyfunc.Field documents. A failure is
// reported in the Fail, whose zero value means success; the string is then
// the value, possibly empty (keyfunc counts an empty value as missing). Nil
// when package protoread is not linked.
var Field func(req any, path []string) (string, Fail)

// Metadata returns the values of the incoming gRPC metadata entry name,
// which is lower-case, of the call whose context is ctx: nil when the call
// has no such entry or ctx carries no incoming metadata. Nil when package
// protoread is not linked.
var Metadata func(ctx context.Context, name string) []string

// Kind says how a read failed. Package keyfunc turns each into its own
// sentinel error.
type Kind uint8

// Kinds of failure.
const (
	OK      Kind = iota // the read succeeded
	Skip                // the message type has no such field: keyfunc.ErrSkip
	Missing             // the value is absent: keyfunc.ErrMissing
	Invalid             // the value or request cannot give a key: keyfunc.ErrInvalid
)

// Fail is the outcome of a read that failed: its Kind, and a message for
// the client that says what is wrong and never repeats the request's value,
// such as "repeated field". The zero Fail means success. It is a plain value
// rather than an error so that reporting a failure with a constant message
// allocates nothing.
type Fail struct {
	Kind Kind
	Msg  string
}

// Messages that keyfunc has errors of its own for, so that reporting them
// allocates nothing.
const (
	MsgMissing  = "missing"   // an unset field
	MsgNotFound = "not found" // an index past the end of a repeated field
)
