// Package storetest holds the checks and helpers that the tests of the
// stores and of what they are built on (the breaker) share. The
// conformance suite, which needs the store package, is its subpackage
// conformance.
package storetest

import (
	"context"
	"testing"
	"time"
)

// Blocker is what BlockKeepsLongest uses of a store.Blocker (this package
// cannot import store: the store package's own tests use it).
type Blocker interface {
	Block(ctx context.Context, key string, now time.Time, d time.Duration) (time.Time, error)
	Unblock(ctx context.Context, key string) error
}

// BlockKeepsLongest checks b, whose key is blocked until end, at now
// (before end): a shorter Block keeps the longer block in place, a longer
// one extends it to now+2h; then Unblock lifts it.
func BlockKeepsLongest(t testing.TB, b Blocker, key string, now, end time.Time) {
	t.Helper()
	ctx := context.Background()
	if until, _ := b.Block(ctx, key, now, time.Second); !until.Equal(end) {
		t.Fatalf("a shorter Block moved the end to %v", until)
	}
	if until, _ := b.Block(ctx, key, now, 2*time.Hour); !until.Equal(now.Add(2 * time.Hour)) {
		t.Fatalf("a longer Block ends at %v", until)
	}
	if err := b.Unblock(ctx, key); err != nil {
		t.Fatal(err)
	}
}
