package store

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
)

// BenchmarkMemoryTakeDuringSweep measures the latency of Take on 1,000
// active keys, from 4 goroutines, while another sweeps 500,000 idle keys
// out of the same store (sliding_log, 100 events per minute): an op is one
// whole sweep, with the store filled again before each, untimed. It
// reports Take's latency percentiles and the longest (µs), and how long
// the sweep took (ms): as the store sweeps (letting go of a shard's lock
// every sweepBatch entries), and holding each shard's lock throughout its
// sweep, for comparison. Run it with -benchtime=3x or so.
func BenchmarkMemoryTakeDuringSweep(b *testing.B) {
	b.Run(fmt.Sprintf("batch%d", sweepBatch), func(b *testing.B) { benchTakeDuringSweep(b, sweepBatch) })
	b.Run("wholeshard", func(b *testing.B) { benchTakeDuringSweep(b, math.MaxInt) })
}

func benchTakeDuringSweep(b *testing.B, batch int) {
	const idle, active = 500_000, 1000
	const takers = 4
	l, err := algorithms.New(algorithms.SlidingLog, algorithms.Config{
		Tiers: []algorithms.Tier{{Events: 100, Window: time.Minute}},
	})
	if err != nil {
		b.Fatal(err)
	}
	keys := makeKeys(idle + active)
	idleKeys, activeKeys := keys[:idle], keys[idle:]
	ctx := context.Background()
	later := t0.Add(2 * time.Minute) // the idle keys' window is over

	lats := make([][]time.Duration, takers)
	var sweepTime time.Duration
	for range b.N {
		b.StopTimer()
		m := NewMemory(l, MemoryOptions{MaxKeys: 2 * (idle + active), SweepInterval: time.Hour})
		for _, k := range idleKeys {
			m.Take(ctx, k, t0, 1)
		}
		for _, k := range activeKeys {
			m.Take(ctx, k, later, 1)
		}
		b.StartTimer()

		// takers goroutines Take in a loop, each timed from its start;
		// when a shard's lock is held long, they all end up waiting
		// for it, as a server's requests do.
		done := make(chan struct{})
		var wg sync.WaitGroup
		for g := range takers {
			wg.Go(func() {
				for i := g * 7919; ; i++ {
					select {
					case <-done:
						return
					default:
					}
					start := time.Now()
					m.Take(ctx, activeKeys[i%active], later, 1)
					lats[g] = append(lats[g], time.Since(start))
				}
			})
		}
		start := time.Now()
		dropped := m.sweep(later, batch)
		sweepTime += time.Since(start)
		close(done)
		wg.Wait()

		b.StopTimer()
		if dropped != idle || m.Len() != active {
			b.Fatalf("Sweep dropped %d, %d keys left; want %d, %d", dropped, m.Len(), idle, active)
		}
		m.Destruct()
		b.StartTimer()
	}
	lat := slices.Concat(lats...)
	slices.Sort(lat)
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	pct := func(p float64) float64 {
		return float64(lat[int(p*float64(len(lat)-1))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(float64(sum.Nanoseconds())/float64(len(lat))/1e3, "mean-µs")
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	b.ReportMetric(pct(0.999), "p99.9-µs")
	b.ReportMetric(pct(1), "max-µs")
	b.ReportMetric(float64(sweepTime.Milliseconds())/float64(b.N), "sweep-ms")
}
