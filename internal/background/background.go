// Package background marks the contexts of the Redis engine's own
// background reads (the closed gates), so that tests counting the
// commands a request sends can leave them out.
package background

import "context"

type key struct{}

// Mark returns ctx marked as a background read's.
func Mark(ctx context.Context) context.Context { return context.WithValue(ctx, key{}, true) }

// Marked reports whether ctx is a background read's.
func Marked(ctx context.Context) bool { return ctx.Value(key{}) != nil }
