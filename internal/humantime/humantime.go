// Package humantime writes durations for people, as the admin page and the
// routelock command show them: precise when short, rounded when long.
package humantime

import (
	"strings"
	"time"
)

// Duration returns d rounded to about three significant digits below a
// minute, to the second below an hour and to the minute above, as
// time.Duration prints it ("731ms", "4.27s", "12m5s", "2h3m").
func Duration(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + Duration(-d)
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < 10*time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
}
