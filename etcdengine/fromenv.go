package etcdengine

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/routelock/lock/internal/defaultengine"
	"github.com/routelock/lock/lockcore"
)

// Importing the package makes ETCD_ENDPOINTS the package-level helpers'
// etcd (lock.ByParam without lock.SetDefault; see lock.SetDefault).
func init() {
	defaultengine.RegisterEtcd(defaultengine.Etcd{Check: checkEndpoints, Open: openFromEnv, Operator: operatorFromEnv})
}

// endpointsForm is the form ETCD_ENDPOINTS takes, for its errors.
const endpointsForm = "comma-separated etcd client URLs, such as http://etcd1:2379,http://etcd2:2379"

// endpoints returns the client URLs of ETCD_ENDPOINTS, as getenv reads
// it, and a description of them for a log line. Its error names the
// variable and the form it takes, never its value.
func endpoints(getenv func(string) string) ([]string, string, error) {
	raw := getenv(defaultengine.EtcdEndpoints)
	var eps, hosts []string
	for _, ep := range strings.Split(raw, ",") {
		ep = strings.TrimSpace(ep)
		if ep == "" {
			continue
		}
		u, err := url.Parse(ep)
		if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.User != nil || u.Path != "" && u.Path != "/" || u.RawQuery != "" {
			return nil, "", fmt.Errorf("%w: %s: want %s, without credentials", lockcore.ErrMisconfigured, defaultengine.EtcdEndpoints, endpointsForm)
		}
		eps, hosts = append(eps, ep), append(hosts, u.Scheme+"://"+u.Host)
	}
	if len(eps) == 0 {
		return nil, "", fmt.Errorf("%w: %s names no endpoint: want %s", lockcore.ErrMisconfigured, defaultengine.EtcdEndpoints, endpointsForm)
	}
	return eps, strings.Join(hosts, ","), nil
}

// checkEndpoints reports whether ETCD_ENDPOINTS is well formed.
func checkEndpoints(getenv func(string) string) error {
	_, _, err := endpoints(getenv)
	return err
}

// openFromEnv opens an Engine with the default Options on a client of its
// own to the etcd of ETCD_ENDPOINTS. The client connects lazily: an
// unreachable etcd shows as unavailable locks.
func openFromEnv(getenv func(string) string) (lockcore.Engine, string, func(), error) {
	e, where, closeAll, err := fromEnv(getenv, "")
	if err != nil {
		return nil, "", nil, err
	}
	return e, where, closeAll, nil
}

// operatorFromEnv opens, as openFromEnv, an Engine with key prefix
// prefix ("" for the default) for its Operator.
func operatorFromEnv(getenv func(string) string, prefix string) (lockcore.Operator, string, func(), error) {
	e, where, closeAll, err := fromEnv(getenv, prefix)
	if err != nil {
		return nil, "", nil, err
	}
	return e, "etcd at " + where, closeAll, nil
}

// fromEnv opens an Engine with Prefix prefix on a client of its own to the
// etcd of ETCD_ENDPOINTS.
func fromEnv(getenv func(string) string, prefix string) (*Engine, string, func(), error) {
	eps, where, err := endpoints(getenv)
	if err != nil {
		return nil, "", nil, err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, "", nil, fmt.Errorf("%w: %s: the etcd client refused the endpoints", lockcore.ErrMisconfigured, defaultengine.EtcdEndpoints)
	}
	e, err := New(cli, Options{Prefix: prefix})
	if err != nil {
		_ = cli.Close()
		return nil, "", nil, err
	}
	return e, where, func() {
		_ = e.Close()
		_ = cli.Close()
	}, nil
}
