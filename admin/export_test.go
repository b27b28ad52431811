package admin

import (
	"net/http"
	"time"

	"github.com/routelock/lock/lockcore"
)

// HandlerAt is Handler with the page reading the time from now.
func HandlerAt(op lockcore.Operator, c Config, now func() time.Time) http.Handler {
	return newHandler(op, c, now)
}
