package store

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
)

// makeKeys returns n distinct keys shaped like IPv4 addresses.
func makeKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("10.%d.%d.%d", (i>>16)&255, (i>>8)&255, i&255)
	}
	return keys
}

// benchLimiters returns the limiters the store benchmarks run with: the
// test-only counter, and every built-in algorithm already implemented. The
// limit is high enough that the benchmarks measure admitted requests.
func benchLimiters(b *testing.B) []algorithms.Limiter {
	ls := []algorithms.Limiter{fakeLimiter{limit: 1 << 40, window: time.Minute}}
	for _, name := range algorithms.Names {
		if l, err := algorithms.New(name, algorithms.Config{
			Tiers: []algorithms.Tier{{Events: 1 << 30, Window: time.Minute}},
		}); err == nil {
			ls = append(ls, l)
		}
	}
	return ls
}

// BenchmarkMemoryTake measures Take on a warm set of 1k keys and on a
// single hot key, serial and parallel, and Take of keys never seen before
// (each evicting the stalest key of a full store). The clock advances 1µs
// per Take so that the algorithms do their real work.
func BenchmarkMemoryTake(b *testing.B) {
	ctx := context.Background()
	for _, l := range benchLimiters(b) {
		b.Run(l.Name(), func(b *testing.B) {
			if l.Name() == algorithms.SlidingLog || l.Name() == algorithms.Concurrency {
				// A log or a lease per admitted event: keep them bounded.
				l, _ = algorithms.New(l.Name(), algorithms.Config{
					Tiers: []algorithms.Tier{{Events: 100, Window: time.Millisecond}},
				})
			}
			warm := makeKeys(1000)
			for _, tc := range []struct {
				name string
				keys []string
			}{{"warm1k", warm}, {"hotkey", warm[:1]}} {
				b.Run("serial/"+tc.name, func(b *testing.B) {
					m := newTestMemory(b, l, MemoryOptions{})
					for _, k := range tc.keys {
						m.Take(ctx, k, t0, 1)
					}
					b.ReportAllocs()
					b.ResetTimer()
					for i := range b.N {
						m.Take(ctx, tc.keys[i%len(tc.keys)], t0.Add(time.Duration(i)*time.Microsecond), 1)
					}
				})
				b.Run("parallel/"+tc.name, func(b *testing.B) {
					m := newTestMemory(b, l, MemoryOptions{})
					for _, k := range tc.keys {
						m.Take(ctx, k, t0, 1)
					}
					var worker atomic.Int64
					b.ReportAllocs()
					b.ResetTimer()
					b.RunParallel(func(pb *testing.PB) {
						// Each worker keeps its own clock (a shared one would
						// be a contended cache line); states clamp readings
						// that arrive out of order.
						w := int(worker.Add(1))
						i := w * 7919
						for pb.Next() {
							m.Take(ctx, tc.keys[i%len(tc.keys)], t0.Add(time.Duration(i)*time.Microsecond), 1)
							i++
						}
					})
				})
			}
			b.Run("serial/newkeys", func(b *testing.B) {
				// 64k keys cycled through a store that holds 4k: every
				// Take is of a key evicted long before.
				keys := makeKeys(1 << 16)
				m := newTestMemory(b, l, MemoryOptions{MaxKeys: 4096})
				for _, k := range keys {
					m.Take(ctx, k, t0, 1)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					m.Take(ctx, keys[i&(len(keys)-1)], t0.Add(time.Duration(i)*time.Microsecond), 1)
				}
			})
		})
	}
}

// BenchmarkMemoryBytesPerKey reports the heap a key costs in the memory
// store (entry, map slot, algorithm state after one admitted Take; not the
// key string itself) for each algorithm, with a limit of 100 events per
// minute. Each op fills a fresh store with 100k keys.
func BenchmarkMemoryBytesPerKey(b *testing.B) {
	const n = 100_000
	keys := makeKeys(n)
	ctx := context.Background()
	ls := []algorithms.Limiter{fakeLimiter{limit: 100, window: time.Minute}}
	for _, name := range algorithms.Names {
		if l, err := algorithms.New(name, algorithms.Config{
			Tiers: []algorithms.Tier{{Events: 100, Window: time.Minute}},
		}); err == nil {
			ls = append(ls, l)
		}
	}
	for _, l := range ls {
		b.Run(l.Name(), func(b *testing.B) {
			var perKey float64
			for range b.N {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				m := NewMemory(l, MemoryOptions{}) // default MaxKeys: no eviction
				for _, k := range keys {
					m.Take(ctx, k, t0, 1)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				if m.Len() != n {
					b.Fatalf("Len = %d, want %d", m.Len(), n)
				}
				perKey = float64(after.HeapAlloc-before.HeapAlloc) / n
				runtime.KeepAlive(m)
				m.Destruct()
			}
			b.ReportMetric(perKey, "B/key")
		})
	}
}
