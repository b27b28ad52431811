package keyfunc_test

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"

	"github.com/routelock/lock/keyfunc"
	"github.com/routelock/lock/lockcore"
)

// A key of two parts, a user header and an order id from the JSON body;
// the body stays readable for the handler.
func ExampleJoin() {
	key := keyfunc.Join(keyfunc.Header("X-User-ID"), keyfunc.JSON("order.id"))
	r := httptest.NewRequest("POST", "/orders", strings.NewReader(`{"order": {"id": 7}}`))
	r.Header.Set("X-User-ID", "u42")
	parts, _, err := key.HTTP(r)
	fmt.Println(parts, err)

	r = httptest.NewRequest("POST", "/orders", strings.NewReader(`{"order": {}}`))
	r.Header.Set("X-User-ID", "u42")
	_, _, err = key.HTTP(r)
	var p interface{ Public() string } // what the client may be told
	errors.As(err, &p)
	fmt.Println(errors.Is(err, lockcore.ErrInvalidKey), errors.Is(err, keyfunc.ErrMissing), p.Public())
	// Output:
	// [X-User-Id u42 order.id 7] <nil>
	// true true JSON(order.id): not found
}

// As gives sources that spell one resource differently the same name, so
// that an HTTP route and a gRPC method share a lock.
func ExampleFunc_As() {
	key := keyfunc.Query("sku").As("product")
	parts, _, err := key.HTTP(httptest.NewRequest("GET", "/stock?sku=42", nil))
	fmt.Println(parts, err, key)
	// Output:
	// [product 42] <nil> Query(sku).As(product)
}
