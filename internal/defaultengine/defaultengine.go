// Package defaultengine is where an engine that lives in a module of its
// own registers how the package-level helpers of package lock (lock.By,
// lock.ByParam without lock.SetDefault), and the routelock command built
// with it, open it from the environment:
// the main module cannot link it, and links only this registry. Package
// etcdengine fills it in from its init, so that a program that imports it
// locks on etcd when EtcdEndpoints is set.
//
// It links the standard library and lockcore only.
package defaultengine

import (
	"sync"

	"github.com/routelock/lock/lockcore"
)

// EtcdEndpoints is the variable that names the etcd cluster of the
// package-level helpers: comma-separated client URLs.
const EtcdEndpoints = "ETCD_ENDPOINTS"

// EtcdModule is the import path a program adds to lock on etcd.
const EtcdModule = "github.com/routelock/lock/etcdengine"

// Opener opens an engine from the environment getenv reads. It returns
// the engine, where it is for a log line (never a password), and a
// function that closes the engine and its client. Its error names the
// variable it could not use, never the variable's value.
type Opener func(getenv func(string) string) (e lockcore.Engine, where string, close func(), err error)

// Etcd is how the etcd engine is opened from the environment.
type Etcd struct {
	// Check reports, without connecting, whether the environment names
	// the engine well; its error names the variable, never its value.
	Check func(getenv func(string) string) error
	// Open opens it.
	Open Opener
	// Operator opens an Operator of it, with key prefix prefix ("" for
	// its default), for the routelock command: where it is, and how to
	// close it, as Open.
	Operator func(getenv func(string) string, prefix string) (op lockcore.Operator, where string, close func(), err error)
}

var (
	mu   sync.Mutex
	etcd *Etcd
)

// RegisterEtcd makes e the way to open the etcd engine. The last call
// wins.
func RegisterEtcd(e Etcd) {
	mu.Lock()
	etcd = &e
	mu.Unlock()
}

// EtcdEngine returns the registered way to open the etcd engine, or nil
// when the program does not link it.
func EtcdEngine() *Etcd {
	mu.Lock()
	defer mu.Unlock()
	return etcd
}
