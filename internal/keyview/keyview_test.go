package keyview_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/routelock/lock/internal/keyview"
	"github.com/routelock/lock/keyfunc"
)

// TestSetByKeyfunc: package keyfunc fills in every function for its Func,
// and they answer for a Func made with Also.
func TestSetByKeyfunc(t *testing.T) {
	v := keyview.Of[keyfunc.Func]()
	fs := reflect.ValueOf(*v)
	for i := range fs.NumField() {
		if fs.Field(i).IsNil() {
			t.Errorf("keyfunc left %s unset", fs.Type().Field(i).Name)
		}
	}
	f := keyfunc.Param("productID").Also(keyfunc.Join(keyfunc.Param("userID"), keyfunc.Header("X-A")), keyfunc.Param("productID").As("p"))
	if got := v.Params(f); !slices.Equal(got, []string{"productID", "userID"}) {
		t.Errorf("Params = %q, want [productID userID]", got)
	}
	rs := v.Resources(f)
	if len(rs) != 3 || rs[0].String() != "Param(productID)" || rs[2].String() != "Param(productID).As(p)" {
		t.Errorf("Resources = %v", rs)
	}
	if got := v.Resources(rs[1]); len(got) != 1 || got[0].String() != rs[1].String() {
		t.Errorf("Resources of one resource = %v, want itself", got)
	}
	if err := v.CheckRPC(f, nil); err != nil {
		t.Errorf("CheckRPC of sources without Check: %v", err)
	}
	c := keyfunc.Custom(keyfunc.Source{
		Name:  "c",
		RPC:   func(context.Context, any) (string, error) { return "v", nil },
		Check: func(any) error { return errors.New("no field c") },
	})
	if err := v.CheckRPC(keyfunc.Param("x").Also(c), nil); err == nil || !strings.Contains(err.Error(), "Custom(c): no field c") {
		t.Errorf("CheckRPC of an Also resource whose Check fails: %v", err)
	}
}

// TestOfAnotherType: asking for a type keyfunc did not set panics, once,
// where the asking package is initialised.
func TestOfAnotherType(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Of[string] did not panic")
		}
	}()
	keyview.Of[string]()
}
