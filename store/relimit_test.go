package store

import (
	"context"
	"testing"
	"time"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
)

// TestMemoryUnder: a store made under one limit and decided under another
// (a config reload that kept it, a request's own limit) keeps what each
// key used; a Limiter of another algorithm is refused.
func TestMemoryUnder(t *testing.T) {
	lim := func(name string, events int64) algorithms.Limiter {
		l, err := algorithms.New(name, algorithms.Config{Tiers: []algorithms.Tier{{Events: events, Window: time.Minute}}})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	ctx := context.Background()
	t0 := time.Unix(1_700_000_040, 0)
	for _, name := range algorithms.Names {
		t.Run(name, func(t *testing.T) {
			m := newTestMemory(t, lim(name, 100), MemoryOptions{})
			if d, _ := m.Take(ctx, "k", t0, 60); !d.Allowed || d.Remaining != 40 {
				t.Fatalf("take 60 of 100: %+v", d)
			}
			pro, err := m.Under(lim(name, 1000))
			if err != nil {
				t.Fatal(err)
			}
			if d, _ := pro.Take(ctx, "k", t0, 0); d.Limit != 1000 || d.Remaining != 940 {
				t.Fatalf("under 1000: %+v, want 940 left", d)
			}
			low, _ := m.Under(lim(name, 50))
			if d, _ := low.Take(ctx, "k", t0, 1); d.Allowed {
				t.Fatalf("60 used, under 50: %+v, want denied", d)
			}
			if d, _ := low.Take(ctx, "other", t0, 1); !d.Allowed || d.Remaining != 49 {
				t.Fatalf("a new key under 50: %+v", d)
			}
			other := algorithms.Concurrency
			if name == other {
				other = algorithms.SlidingLog
			}
			if _, err := m.Under(lim(other, 10)); err == nil {
				t.Fatalf("Under a Limiter of %s: no error", other)
			}
		})
	}
}
