package redistest

import (
	"context"
	"testing"
)

// TestDeploymentsAnswer: every deployment of Deployments takes a write and
// reads it back through a client at go-redis's defaults.
func TestDeploymentsAnswer(t *testing.T) {
	RunDeployments(t, func(t *testing.T, b *Backend) {
		c := b.Universal(t)
		ctx := context.Background()
		k := Prefix(t) + "k"
		if err := c.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if v, err := c.Get(ctx, k).Result(); err != nil || v != "v" {
			t.Fatalf("GET = %q, %v", v, err)
		}
		c.Del(ctx, k)
	})
}

func TestMain(m *testing.M) { Main(m) }
