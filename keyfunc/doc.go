// Package keyfunc turns a request into the parts of a lock key: which
// resource the request touches, such as product 42. It knows nothing of
// Redis; the middleware and interceptor packages build a lock key from the
// parts with lockcore.NewKey. Nor does it import gRPC or protobuf, so a
// program that locks only HTTP routes links neither: [Field] and [Metadata]
// read gRPC calls through a reader that package interceptor links into every
// gRPC server, and fail with [ErrInvalid] in a program without it.
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
// # Validation
//
// A key is always stated. A value that is missing or empty fails with an
// error matching [ErrMissing]; one longer than [MaxLen] bytes, ambiguous
// (a header, query parameter or JSON field given twice) or not a scalar fails
// with [ErrInvalid]. The middleware answers both with 400 and never runs the
// handler. Values may hold any bytes: lockcore escapes them, so user input
// cannot collide with another key or leave its namespace. Error messages name
// the source (Header(X-User-Id)) but never repeat the value.
//
// A route parameter that the matched route does not have is not an error:
// [Func.HTTP] returns [ErrSkip] and the middleware lets the request through
// unlocked. That is what makes a router-wide middleware lock only the routes
// that name the resource.
package keyfunc
