// Package keyfunc turns a request into the parts of a lock key: which
// resource the request touches, such as product 42. It knows nothing of
// Redis; the middleware and interceptor packages build a lock key from the
// parts with lockcore.NewKey. Nor does it import gRPC or protobuf, so a
// program that locks only HTTP routes links neither: the key functions that
// read gRPC calls, Field (a field of the request message) and Metadata, are
// in package github.com/routelock/lock/interceptor, built with [Custom], and
// combine with the ones here through [Join] and [Func.As].
//
// # Keys name resources
//
// A key function yields a resource name and a value, so Param("productID")
// yields the parts ["productID", "42"] for /products/42/buy. The same
// resource on another route, or over gRPC, gets the same key: that is what
// makes /buy and /refund exclude each other. [Func.As] renames the resource,
// so that an HTTP route on {productID} and a gRPC method on product_id share
// one lock, and [Join] combines several sources into one key:
//
//	Param("productID")                              productID:42
//	Join(Param("productID"), Header("X-User-ID"))   productID:42:X-User-Id:u7
//	Param("productID").As("product")                product:42
//
// # One resource, one key
//
// A key names the resource however the client spelt it, because the handler
// acts on the resource, not on the spelling. Every value of every key
// function goes through one canonical form before it becomes a key part:
//
//   - a decimal integer, with an optional sign and leading zeros ("42",
//     "042", "+42", "%34%32" decoded by Param), is written in canonical
//     decimal ("42"; "-0" is "0"), of any length, without rounding;
//   - a UUID is written in lower-case 8-4-4-4-12 form, from any spelling
//     that UUID parsers read as one: either case, 32 hex digits without
//     dashes, in braces, or as a urn:uuid: URN;
//   - a JSON number is written exactly, whatever its notation: 42, 42.0,
//     4.2e1 and 420e-1 are "42", 0.50 and 5e-1 are "0.5"; a number with an
//     absurd exponent, or whose canonical form is longer than
//     256 bytes, is invalid;
//   - anything else is used as it is, byte for byte.
//
// Two spellings of one resource share a lock; two values that could name
// different resources never do, except where a handler would read them as
// one number or one UUID anyway (merging only makes a lock wider). [Param]
// also decodes a segment chi hands over still percent-encoded.
//
// # Validation
//
// A key is always stated. A value that is missing or empty, longer than
// 256 bytes, ambiguous (a header, query parameter or
// JSON field given twice) or not a scalar fails with an error matching
// [lockcore.ErrInvalidKey]; a missing or empty one matches [ErrMissing]
// too. A key has at most
// 8 parts, names included ([Join] panics beyond). The
// limits are lockcore's own, so a key that passes here is accepted by every
// engine. The middleware answers such errors with 400 and never runs the
// handler. Values may hold any bytes: lockcore escapes them, so user input
// cannot collide with another key or leave its namespace. Errors name the
// source (Header(X-User-Id)) but never repeat the value, and say what the
// client may be told through a method Public() string (see [ErrSkip]).
//
// A route parameter that a route does not have is not an error where the
// lock sits before routing (a chi router's r.Use): [Func.HTTP] returns
// [ErrSkip] and the middleware lets the request through unlocked. That is
// what makes a router-wide middleware lock only the routes that name the
// resource. A lock on one route that lacks it is a configuration error,
// matching [lockcore.ErrMisconfigured], which the middleware answers with
// 500.
package keyfunc
