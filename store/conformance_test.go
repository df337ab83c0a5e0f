package store_test

import (
	"testing"
	"time"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/internal/storetest/conformance"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// underOther is the memory store as a store under test of the conformance
// suite, reached the way a reload or per-request limits reach it: a store
// made under other limits of the algorithm, deciding under l through
// Under. Every Take then goes through the conversion of a state to l,
// which must change nothing for a state already decided under l; and the
// suite's reference, a memory store made under l, is another value.
func underOther(t *testing.T, l algorithms.Limiter, _ string) store.Store {
	other, err := algorithms.New(l.Name(), algorithms.Config{Tiers: []algorithms.Tier{{Events: 2, Window: 7 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	m := store.NewMemory(other, store.MemoryOptions{SweepInterval: time.Hour})
	t.Cleanup(func() { m.Destruct() })
	s, err := m.Under(l)
	if err != nil {
		t.Fatal(err)
	}
	if s == store.Store(m) {
		t.Fatalf("%s: Under(%+v) is the store itself", l.Name(), l.Config())
	}
	return s
}

// TestConformanceUnder plays the conformance suite through the memory
// store's Under.
func TestConformanceUnder(t *testing.T) {
	tg := conformance.Target{Name: "under", New: underOther}
	n := conformance.Run(t, tg, 300)
	t.Logf("%d Takes and %d Undos compared", n.Takes, n.Undos)
	conformance.RunHandwritten(t, tg)
}
