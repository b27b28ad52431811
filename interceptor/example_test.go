package interceptor_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"

	"github.com/routelock/lock/interceptor"
	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
)

// The status a refused call ends with: its code, a message that carries
// no key value or token, and, for a busy lock, when to retry.
func ExampleStatus() {
	busy := &lockcore.ContentionError{Key: "productID:42", RetryAfter: 300 * time.Millisecond}
	st := status.Convert(interceptor.Status(busy))
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			fmt.Println(st.Code(), st.Message(), "retry in", ri.RetryDelay.AsDuration())
		}
	}
	gone := errors.Join(&lockcore.ContentionError{Key: "productID:42"}, context.Canceled)
	fmt.Println(interceptor.Code(gone))
	missing := &keyfunc.Error{Source: "Field(product_id)", Err: keyfunc.ErrMissing}
	fmt.Println(status.Convert(interceptor.Status(missing)).Message())
	fmt.Println(interceptor.Code(fmt.Errorf("%w: wrong password", lockcore.ErrMisconfigured)))
	// Output:
	// Aborted routelock: resource busy, retry later retry in 300ms
	// Canceled
	// routelock: invalid lock key: Field(product_id): missing
	// Internal
}
