// Package config holds the options of package lock, which package grpclock
// extends with its own: an Option made here is a lock.Option.
package config

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/routelock/lock/lockcore"
	"github.com/routelock/lock/lockcore/redisengine"
)

// Scope is where an option may be given: a set of places.
type Scope uint8

// Places an option may be given.
const (
	InNew    Scope = 1 << iota // lock.New and lock.FromEngine
	InRedis                    // lock.New only: the Redis engine's options
	InRoute                    // lock.By, lock.ByParam
	InMethod                   // grpclock.Method

	Anywhere = InNew | InRedis | InRoute | InMethod
)

func (s Scope) String() string {
	var where []string
	if s&InNew != 0 {
		where = append(where, "New, FromEngine")
	} else if s&InRedis != 0 {
		where = append(where, "New")
	}
	if s&InRoute != 0 {
		where = append(where, "a route (By, ByParam)")
	}
	if s&InMethod != 0 {
		where = append(where, "a gRPC method (grpclock.Method)")
	}
	return strings.Join(where, " or ")
}

// Option is lock.Option: a named change to a Config, valid in scope.
type Option struct {
	name  string
	scope Scope
	apply func(*Config)
}

// New returns an option.
func New(name string, scope Scope, apply func(*Config)) Option {
	return Option{name: name, scope: scope, apply: apply}
}

// Config is what options set.
type Config struct {
	Redis   redisengine.Options
	Wait    time.Duration // 0: lockcore.DefaultWait; < 0: fail fast
	TTL     time.Duration // 0: the engine's
	Name    string
	Trust   func(*http.Request) bool
	OnError func(http.ResponseWriter, *http.Request, error)
	Logger  *slog.Logger
	Methods []string // nil: every HTTP method

	// Wrap, if set, wraps the Locker's engine (telemetry: package lockotel).
	Wrap func(lockcore.Engine) lockcore.Engine

	RPCTrust   func(ctx context.Context, fullMethod string) bool
	RPCOnError func(ctx context.Context, fullMethod string, err error) error
}

// WrapEngine returns e wrapped by Wrap, or e when Wrap is nil.
func (c *Config) WrapEngine(e lockcore.Engine) lockcore.Engine {
	if c.Wrap == nil {
		return e
	}
	return c.Wrap(e)
}

// ApplyAll applies opts, given in place s, to c. It panics on a zero
// option and on one given where it means nothing.
func (c *Config) ApplyAll(s Scope, opts []Option) {
	for _, o := range opts {
		if o.apply == nil {
			panic("lock: zero Option")
		}
		if o.scope&s == 0 {
			panic(fmt.Sprintf("lock: option %s applies only to %v", o.name, o.scope))
		}
		o.apply(c)
	}
}
