package interceptor

import (
	"fmt"
	"sort"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/routelock/lock/lockcore"
)

// Check returns an error matching lockcore.ErrMisconfigured that names
// every rule matching no method registered on s, such as a misspelt method
// name, whose calls would otherwise run unlocked without a word, and every
// rule whose key cannot read the request messages of the methods it
// locks, such as a Field path the message type does not have
// (Field("productId") for product_id), whose calls would otherwise fail
// with codes.Internal (keyfunc.Source.Check tells, as Field's does). A
// rule for a service ("/pkg.Service/*") or for every method ("*") is named
// only when none of the methods it locks (those without a rule of their
// own) can be read: the others pass unlocked, as the rule says. The request types come from
// the protobuf registry (protoregistry.GlobalFiles), where generated code
// registers them; a method whose service is not there is not checked. Nil
// when every rule matches and reads. Call it at startup, after registering
// the services:
//
//	c := interceptor.Config{Rules: []interceptor.Rule{interceptor.Method("/shop.Inventory/Reserve", interceptor.Field("product_id"))}}
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(interceptor.UnaryServer(locker, c)))
//	shop.RegisterInventoryServer(srv, inv)
//	if err := interceptor.Check(srv, c.Rules...); err != nil {
//		log.Fatal(err)
//	}
func Check(s *grpc.Server, rules ...Rule) error {
	services := s.GetServiceInfo()
	var unmatched, unread []string
	for _, r := range rules {
		if !matches(services, r.Method) {
			unmatched = append(unmatched, r.Method)
			continue
		}
		if p := unreadable(services, rules, r); p != "" {
			unread = append(unread, p)
		}
	}
	var problems []string
	if len(unmatched) > 0 {
		problems = append(problems, "rules that match no registered method: "+strings.Join(unmatched, ", "))
	}
	problems = append(problems, unread...)
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w: interceptor.Check: %s", lockcore.ErrMisconfigured, strings.Join(problems, "; "))
}

// unreadable returns what stops rule r, one of rules, from reading the
// request messages of the methods of services it locks: for an exact
// rule, its method's; for a wildcard rule, every one of its methods', when
// none can be read. "" when nothing does.
func unreadable(services map[string]grpc.ServiceInfo, rules []Rule, r Rule) string {
	var problems []string
	read := false
	for svc, info := range services {
		for _, mi := range info.Methods {
			full := "/" + svc + "/" + mi.Name
			if ruleOf(rules, full) != r.Method {
				continue
			}
			in := requestType(svc, mi.Name)
			if in == nil {
				read = true // not in the registry: not checked
				continue
			}
			err := view.CheckRPC(r.Key, newMessage(in))
			if err == nil {
				read = true
				continue
			}
			var why []string
			for _, line := range strings.Split(err.Error(), "\n") {
				why = append(why, strings.TrimPrefix(line, "routelock: "))
			}
			problems = append(problems, fmt.Sprintf("%s (request %s): %s", full, in.FullName(), strings.Join(why, ", ")))
		}
	}
	wildcard := strings.HasSuffix(r.Method, "*")
	if len(problems) == 0 || wildcard && read {
		return "" // a wildcard rule passes the methods it cannot read
	}
	sort.Strings(problems)
	if wildcard {
		return "rule " + r.Method + " reads none of its methods: " + strings.Join(problems, ", ")
	}
	return strings.Join(problems, ", ")
}

// ruleOf returns the Method of the rule among rules that a call of
// fullMethod matches, as the interceptors match it: its exact rule, its
// service's, or "*"; "" for none.
func ruleOf(rules []Rule, fullMethod string) string {
	svc := fullMethod[:strings.LastIndexByte(fullMethod, '/')+1] + "*"
	best := ""
	for _, r := range rules {
		switch r.Method {
		case fullMethod:
			return fullMethod
		case svc:
			best = svc
		case "*":
			if best == "" {
				best = "*"
			}
		}
	}
	return best
}

// requestType returns the request message type of method name of service
// svc, as the protobuf registry knows it; nil when it does not.
func requestType(svc, name string) protoreflect.MessageDescriptor {
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return nil
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil
	}
	md := sd.Methods().ByName(protoreflect.Name(name))
	if md == nil {
		return nil
	}
	return md.Input()
}

// newMessage returns an empty message of type md: of its generated Go
// type when one is registered, else a dynamic one.
func newMessage(md protoreflect.MessageDescriptor) proto.Message {
	if mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName()); err == nil {
		return mt.New().Interface()
	}
	return dynamicpb.NewMessage(md)
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
