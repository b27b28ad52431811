package main

import (
	"testing"
	"time"
)

// TestSaleLocked: with the lock, three instances on an embedded etcd sell
// exactly the stock to 120 buyers, and refuse the others.
func TestSaleLocked(t *testing.T) {
	endpoints, stop, err := etcd()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	c := sale{buyers: 120, items: 7, instances: 3, payment: time.Millisecond, endpoints: endpoints}
	r, err := c.run(true)
	if err != nil {
		t.Fatal(err)
	}
	if r.sold != int64(c.items) || r.refused != int64(c.buyers-c.items) {
		t.Fatalf("sold %d, refused %d; want %d and %d", r.sold, r.refused, c.items, c.buyers-c.items)
	}
}
