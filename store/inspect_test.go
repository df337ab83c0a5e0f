package store

import (
	"context"
	"testing"
	"time"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
)

// TestMemoryInspectReset: for every algorithm, Inspect reports every tier's
// use without consuming, and Reset makes the key whole.
func TestMemoryInspectReset(t *testing.T) {
	ctx := context.Background()
	t0 := time.Unix(1_700_000_000, 0)
	for _, name := range algorithms.Names {
		t.Run(name, func(t *testing.T) {
			cfg := algorithms.Config{Tiers: []algorithms.Tier{{Events: 3, Window: 10 * time.Second}, {Events: 10, Window: time.Minute}}}
			if name == algorithms.Concurrency {
				cfg.Tiers = cfg.Tiers[:1]
			}
			l, err := algorithms.New(name, cfg)
			if err != nil {
				t.Fatal(err)
			}
			m := NewMemory(l, MemoryOptions{Now: func() time.Time { return t0 }})
			defer m.Destruct()

			ks, err := m.Inspect(ctx, "k", t0)
			if err != nil {
				t.Fatal(err)
			}
			if len(ks.Tiers) != len(cfg.Tiers) || ks.Tiers[0].Used != 0 || ks.Tiers[0].Remaining != 3 || ks.Tiers[0].Window != 10*time.Second {
				t.Fatalf("unseen key: %+v", ks)
			}
			if m.Len() != 0 {
				t.Fatalf("Inspect of an unseen key added it: %d keys", m.Len())
			}
			for range 3 {
				if d, _ := m.Take(ctx, "k", t0, 1); !d.Allowed {
					t.Fatalf("denied within the limit: %+v", d)
				}
			}
			// Inspecting any number of times consumes nothing.
			for range 5 {
				if ks, _ = m.Inspect(ctx, "k", t0); ks.Tiers[0].Remaining != 0 || ks.Tiers[0].Used != 3 || ks.Tiers[0].ResetAfter <= 0 {
					t.Fatalf("after 3 requests: %+v", ks.Tiers[0])
				}
			}
			if len(ks.Tiers) == 2 && (ks.Tiers[1].Used != 3 || ks.Tiers[1].Remaining != 7 || ks.Tiers[1].Window != time.Minute) {
				t.Fatalf("tier 2 after 3 requests: %+v", ks.Tiers[1])
			}
			if d, _ := m.Take(ctx, "k", t0, 1); d.Allowed {
				t.Fatalf("admitted beyond the limit: %+v", d)
			}
			if err := m.Reset(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			if ks, _ = m.Inspect(ctx, "k", t0); ks.Tiers[0].Used != 0 {
				t.Fatalf("after Reset: %+v", ks.Tiers[0])
			}
			if d, _ := m.Take(ctx, "k", t0, 1); !d.Allowed || d.Remaining != 2 {
				t.Fatalf("after Reset: %+v, want admitted with 2 remaining", d)
			}
		})
	}
}
