package interceptor

import (
	"fmt"
	"strings"

	"google.golang.org/grpc"

	"github.com/routelock/lock/lockcore"
)

// Check returns an error matching lockcore.ErrMisconfigured that names
// every rule matching no method registered on s, such as a misspelt method
// name, whose calls would otherwise run unlocked without a word; nil when
// every rule matches. Call it at startup, after registering the services:
//
//	c := interceptor.Config{Rules: []interceptor.Rule{interceptor.Method("/shop.Inventory/Reserve", interceptor.Field("product_id"))}}
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(interceptor.UnaryServer(locker, c)))
//	shop.RegisterInventoryServer(srv, inv)
//	if err := interceptor.Check(srv, c.Rules...); err != nil {
//		log.Fatal(err)
//	}
func Check(s *grpc.Server, rules ...Rule) error {
	services := s.GetServiceInfo()
	var unmatched []string
	for _, r := range rules {
		if !matches(services, r.Method) {
			unmatched = append(unmatched, r.Method)
		}
	}
	if len(unmatched) == 0 {
		return nil
	}
	return fmt.Errorf("%w: routelock/interceptor: rules that match no registered method: %s", lockcore.ErrMisconfigured, strings.Join(unmatched, ", "))
}

// matches reports whether rule method m ("*", "/pkg.Service/*" or
// "/pkg.Service/Method") names a method of services.
func matches(services map[string]grpc.ServiceInfo, m string) bool {
	if m == "*" {
		return len(services) > 0
	}
	svc, method, ok := strings.Cut(strings.TrimPrefix(m, "/"), "/")
	info, found := services[svc]
	if !ok || !found {
		return false
	}
	if method == "*" {
		return len(info.Methods) > 0
	}
	for _, mi := range info.Methods {
		if mi.Name == method {
			return true
		}
	}
	return false
}
