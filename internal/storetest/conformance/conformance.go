// Package conformance is the suite every store must pass: random and
// handwritten timelines, with passed-in times, played through the store
// under test and through the memory store (the algorithms' Go code),
// comparing every field of every decision.
//
// It is a package of its own, beside storetest, because it imports store,
// which storetest cannot (the store package's own tests use storetest).
package conformance

import (
	"context"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// Target is a store under test.
type Target struct {
	// Name names the store in failure messages ("redis").
	Name string

	// New returns a store deciding under l whose keys are those of zone
	// alone: every timeline gets a zone of its own, whose keys it finds
	// empty. The store must keep a key's state throughout a timeline,
	// whose instants are not the wall clock's.
	New func(t *testing.T, l algorithms.Limiter, zone string) store.Store
}

// Totals is what a run compared.
type Totals struct{ Takes, Undos int64 }

// Run plays every registered algorithm (algorithms.Names) with every
// configuration of Cases it takes, three random timelines (Timeline) of
// steps steps each, through the store tg makes and the memory store, as
// subtests named alg/case. Decisions must agree field by field (Diff),
// durations within a millisecond (how many differ at all is logged). A
// timeline that never admits or never denies fails, and so does a case
// whose timelines undo nothing: they would test less than they seem to.
func Run(t *testing.T, tg Target, steps int) Totals {
	var totals Totals
	ctx := context.Background()
	for _, alg := range algorithms.Names {
		t.Run(alg, func(t *testing.T) {
			for ci, cc := range Cases(alg) {
				l, err := algorithms.New(alg, cc.Config)
				if err != nil {
					t.Logf("%s: %s refuses the config: %v", cc.Name, alg, err)
					continue
				}
				t.Run(cc.Name, func(t *testing.T) {
					caseUndos := 0
					defer func() {
						if caseUndos == 0 {
							t.Errorf("no undo in any timeline")
						}
					}()
					for seed := int64(1); seed <= 3; seed++ {
						s := tg.New(t, l, fmt.Sprintf("conf-%s-%d-%d-%d", alg, ci, seed, time.Now().UnixNano()))
						rng := rand.New(rand.NewSource(seed*1000 + int64(ci)))
						ops := Timeline(rng, alg, cc.Config, steps)
						// The Go algorithms through the memory store, as the
						// handler uses them (sweeping off: the timeline's
						// instants are not the wall clock).
						ref := store.NewMemory(l, store.MemoryOptions{SweepInterval: time.Hour})
						defer ref.Destruct()
						p := NewPlayer(ops)
						inexact := 0
						for i := range ops {
							want, got, taken, err := p.Play(ctx, ref, s, i)
							if err != nil {
								t.Fatalf("seed %d step %d: %v", seed, i, err)
							}
							if !taken {
								continue
							}
							if d := Diff(want, got, false, tg.Name); d != "" {
								t.Fatalf("seed %d %s", seed, p.Differ(i, "", d))
							}
							if Diff(want, got, true, tg.Name) != "" {
								inexact++
							}
						}
						if inexact > 0 {
							t.Logf("seed %d: %d decisions differ by less than 1ms", seed, inexact)
						}
						if p.Allowed == 0 || p.Denied == 0 {
							t.Errorf("seed %d: a weak timeline: %d allowed, %d denied", seed, p.Allowed, p.Denied)
						}
						caseUndos += p.Undos
						totals.Takes += int64(p.Allowed + p.Denied)
						totals.Undos += int64(p.Undos)
					}
				})
			}
		})
	}
	return totals
}
