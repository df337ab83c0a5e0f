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
			// The store itself decides under its own limits again, a key
			// first seen under another's included.
			if d, _ := m.Take(ctx, "other", t0, 0); d.Limit != 100 || d.Remaining != 99 {
				t.Fatalf("back under 100: %+v, want 99 left", d)
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

// TestMemoryUnderInspect: a store decided under other limits (a reload
// that changed them) shows a key under those limits, held or not: what
// its next request would see.
func TestMemoryUnderInspect(t *testing.T) {
	ctx := context.Background()
	t0 := time.Unix(1_700_000_040, 0)
	for _, name := range algorithms.Names {
		if name == algorithms.Concurrency {
			continue // leases, not used units: nothing taken here to show
		}
		t.Run(name, func(t *testing.T) {
			lim := func(events int64) algorithms.Limiter {
				l, err := algorithms.New(name, algorithms.Config{Tiers: []algorithms.Tier{{Events: events, Window: time.Hour}}})
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			m := newTestMemory(t, lim(10), MemoryOptions{})
			for range 8 {
				m.Take(ctx, "k", t0, 1)
			}
			low, _ := m.Under(lim(5))
			ins, ok := low.(Inspector)
			if !ok {
				t.Fatalf("%T is not an Inspector", low)
			}
			for _, c := range []struct {
				key        string
				used, left int64
			}{{"k", 5, 0}, {"never", 0, 5}} {
				ks, err := ins.Inspect(ctx, c.key, t0)
				if err != nil {
					t.Fatal(err)
				}
				if tr := ks.Tiers[0]; tr.Limit != 5 || tr.Used != c.used || tr.Remaining != c.left {
					t.Fatalf("key %s under 5 of 10: %+v, want %d used, %d left", c.key, tr, c.used, c.left)
				}
			}
		})
	}
}
