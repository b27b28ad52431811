package admin

import "time"

// Clock makes the page read the time from now.
func Clock(now func() time.Time) Option { return func(c *config) { c.now = now } }
