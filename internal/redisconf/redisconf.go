// Package redisconf reads from the environment which Redis deployment to
// use, for the package-level Locker, the routelock command, the examples
// and the tests: one server (REDIS_URL), a Redis Cluster
// (REDIS_CLUSTER_URL) or a master behind Sentinel (REDIS_SENTINEL_URL).
// At most one of the three may be set. Nothing it returns, errors
// included, shows a password.
package redisconf

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The environment variables, one per kind of deployment.
const (
	Server   = "REDIS_URL"          // redis.ParseURL syntax
	Cluster  = "REDIS_CLUSTER_URL"  // redis.ParseClusterURL syntax
	Sentinel = "REDIS_SENTINEL_URL" // redis.ParseFailoverURL syntax
)

// Syntax says what each variable takes, for error messages and docs.
const Syntax = "REDIS_URL=redis://[user:password@]host:6379/0 (rediss:// for TLS, unix:///path/to/redis.sock) for one server; " +
	"REDIS_CLUSTER_URL=redis://[user:password@]host1:6379?addr=host2:6379&addr=host3:6379 for a Redis Cluster (any of its nodes); " +
	"REDIS_SENTINEL_URL=redis://[:sentinel-password@]sentinel1:26379?addr=sentinel2:26379&master_name=mymaster[&password=...] for a master behind Sentinel"

// Config is a deployment read from the environment.
type Config struct {
	// Var is the variable it was read from, or "" for the default,
	// localhost:6379.
	Var string
	// Where names the deployment without a password: "127.0.0.1:6379 db 0",
	// "cluster 127.0.0.1:7000,127.0.0.1:7001", "sentinel master mymaster
	// at 127.0.0.1:26379,...".
	Where string

	server   *redis.Options
	cluster  *redis.ClusterOptions
	failover *redis.FailoverOptions
}

// FromEnv reads the deployment from the variables of getenv (os.Getenv, or
// a test's). With none set it is one server at localhost:6379. The error
// names the variable and the syntax it takes, never its value.
func FromEnv(getenv func(string) string) (Config, error) {
	var set []string
	for _, v := range []string{Server, Cluster, Sentinel} {
		if getenv(v) != "" {
			set = append(set, v)
		}
	}
	switch len(set) {
	case 0:
		return Config{Where: "localhost:6379 db 0", server: &redis.Options{Addr: "localhost:6379"}}, nil
	case 1:
	default:
		return Config{}, fmt.Errorf("%s are set: set only one: %s", strings.Join(set, " and "), Syntax)
	}
	return Parse(set[0], getenv(set[0]))
}

// Parse reads raw as the value of the variable name (Server, Cluster or
// Sentinel).
func Parse(name, raw string) (Config, error) {
	c, err := parse(name, raw)
	if err != nil {
		return Config{}, fmt.Errorf("%s is not a Redis URL (%s): want %s", name, Scrub(unwrapURL(err).Error(), raw), Syntax)
	}
	c.Var = name
	return c, nil
}

func parse(name, raw string) (Config, error) {
	switch name {
	case Server:
		o, err := redis.ParseURL(raw)
		if err != nil {
			return Config{}, err
		}
		where := o.Addr
		if o.Network == "unix" {
			where = "unix:" + o.Addr
		}
		return Config{Where: fmt.Sprintf("%s db %d", where, o.DB), server: o}, nil
	case Cluster:
		o, err := redis.ParseClusterURL(raw)
		if err != nil {
			return Config{}, err
		}
		return Config{Where: "cluster " + strings.Join(o.Addrs, ","), cluster: o}, nil
	case Sentinel:
		o, err := redis.ParseFailoverURL(raw)
		if err != nil {
			return Config{}, err
		}
		if o.MasterName == "" {
			return Config{}, errors.New("no master_name")
		}
		return Config{Where: fmt.Sprintf("sentinel master %s at %s db %d", o.MasterName, strings.Join(o.SentinelAddrs, ","), o.DB), failover: o}, nil
	}
	return Config{}, fmt.Errorf("unknown variable %s", name)
}

// Open returns a new client of the deployment: a *redis.Client for one
// server, a *redis.ClusterClient for a Cluster, and a *redis.Client from
// redis.NewFailoverClient for Sentinel. tune, if not nil, adjusts the
// options every kind shares before the client is made.
func (c Config) Open(tune func(*Common)) redis.UniversalClient {
	switch {
	case c.cluster != nil:
		o := *c.cluster
		o.Addrs = append([]string(nil), o.Addrs...)
		if tune != nil {
			tune(&Common{&o.ContextTimeoutEnabled, &o.MaxRetries, &o.PoolSize, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout})
		}
		return redis.NewClusterClient(&o)
	case c.failover != nil:
		o := *c.failover
		o.SentinelAddrs = append([]string(nil), o.SentinelAddrs...)
		if tune != nil {
			tune(&Common{&o.ContextTimeoutEnabled, &o.MaxRetries, &o.PoolSize, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout})
		}
		return redis.NewFailoverClient(&o)
	default:
		o := *c.server
		if tune != nil {
			tune(&Common{&o.ContextTimeoutEnabled, &o.MaxRetries, &o.PoolSize, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout})
		}
		return redis.NewClient(&o)
	}
}

// Common points at the client options that Open's tune may change, whatever
// the kind of deployment.
type Common struct {
	ContextTimeoutEnabled                  *bool
	MaxRetries, PoolSize                   *int
	DialTimeout, ReadTimeout, WriteTimeout *time.Duration
}

func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err // url.Error repeats the URL, password and all
	}
	return err
}

// Scrub removes from msg every piece of the URL raw but its scheme: the
// user information, the password as written and unescaped, and every piece
// of the host, path and query between the URL's separators. A password
// with a '/', '?', '#' or '&' in it splits where url.Parse or go-redis
// reads it, and their errors quote a fragment; a message built from a
// Redis URL must show none.
func Scrub(msg, raw string) string {
	rest := raw
	if i := strings.Index(raw, "://"); i >= 0 {
		rest = raw[i+3:]
	}
	secrets := strings.FieldsFunc(rest, func(r rune) bool { return strings.ContainsRune(":/@?&=#;", r) })
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		secrets = append(secrets, rest[:at])
		if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
			secrets = append(secrets, pw)
			if u, err := url.PathUnescape(pw); err == nil {
				secrets = append(secrets, u)
			}
		}
	}
	if u, err := url.Parse(raw); err == nil {
		for _, vs := range u.Query() {
			secrets = append(secrets, vs...)
		}
	}
	// The longest first, so that a piece inside another is not replaced
	// before it.
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	for _, s := range secrets {
		if len(s) >= 3 {
			msg = strings.ReplaceAll(msg, s, "xxxxx")
		}
	}
	return msg
}
