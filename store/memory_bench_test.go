package store

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
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

// rss returns the process's resident set size, from /proc/self/statm.
func rss() (int64, error) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, err
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0, fmt.Errorf("statm: %q", b)
	}
	pages, err := strconv.ParseInt(string(f[1]), 10, 64)
	if err != nil {
		return 0, err
	}
	return pages * int64(os.Getpagesize()), nil
}

// floodCost is what a flood of distinct keys cost a store.
type floodCost struct {
	held       int     // keys held at the end
	rssPerKey  float64 // resident set growth per held key
	heapPerKey float64 // live heap growth per held key
	rssMB      float64 // resident set growth, MiB
}

// measureFlood floods n distinct keys of keyLen bytes (n > maxKeys: the
// store evicts, as under a real flood) into a fresh store of l bounded at
// maxKeys, and returns what it cost: the live heap after a collection, and
// the resident set, which also holds what the collector has freed but not
// yet returned to the system (the GOGC headroom: up to the live heap again
// with the default GOGC=100), as a server's does.
func measureFlood(l algorithms.Limiter, maxKeys, n, keyLen int) (floodCost, error) {
	var ms runtime.MemStats
	debug.FreeOSMemory() // a clean baseline: nothing retained from before
	runtime.ReadMemStats(&ms)
	heap0 := ms.HeapAlloc
	rss0, err := rss()
	if err != nil {
		return floodCost{}, err
	}

	m := NewMemory(l, MemoryOptions{MaxKeys: maxKeys, SweepInterval: time.Hour})
	ctx := context.Background()
	buf := make([]byte, 0, keyLen)
	for i := range n {
		buf = strconv.AppendInt(append(buf[:0], 'k'), int64(i), 10)
		for len(buf) < keyLen {
			buf = append(buf, '.')
		}
		m.Take(ctx, string(buf), t0, 1)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	rss1, err := rss()
	if err != nil {
		return floodCost{}, err
	}
	c := floodCost{held: m.Len(), rssMB: float64(rss1-rss0) / (1 << 20)}
	c.rssPerKey = float64(rss1-rss0) / float64(c.held)
	c.heapPerKey = float64(int64(ms.HeapAlloc)-int64(heap0)) / float64(c.held)
	m.Destruct()
	runtime.KeepAlive(m)
	return c, nil
}

// BenchmarkMemoryBytesPerKey floods twice DefaultMaxKeys distinct keys into
// a store bounded at DefaultMaxKeys (so that it evicts, as under a real
// flood), for each algorithm with one tier of 100 events per minute and
// for the test-only counter (a 32-byte state: the store's own cost), one
// request per key, and reports the resident set (RSS-B/key) and the live
// heap (heap-B/key) each held key costs, key string included, and the
// resident set the flood grew by (RSS-MiB): the most a flood costs a zone
// by default (a concurrency zone's, whose keys all hold a request in
// flight, up to twice as many keys). Keys are of 16 bytes (about an address's text) and of 256,
// the longest the handler keeps as is. An op is a whole flood.
func BenchmarkMemoryBytesPerKey(b *testing.B) {
	if _, err := rss(); err != nil {
		b.Skip(err)
	}
	const maxKeys, n = DefaultMaxKeys, 2 * DefaultMaxKeys
	ls := []algorithms.Limiter{fakeLimiter{limit: 100, window: time.Minute}}
	for _, name := range algorithms.Names {
		l, err := algorithms.New(name, algorithms.Config{
			Tiers: []algorithms.Tier{{Events: 100, Window: time.Minute}},
		})
		if err != nil {
			b.Fatal(err)
		}
		ls = append(ls, l)
	}
	for _, l := range ls {
		for _, keyLen := range []int{16, 256} {
			b.Run(fmt.Sprintf("%s/key%d", l.Name(), keyLen), func(b *testing.B) {
				var c floodCost
				var err error
				for range b.N {
					if c, err = measureFlood(l, maxKeys, n, keyLen); err != nil {
						b.Fatal(err)
					}
				}
				// A concurrency key keeps the request it admitted in
				// flight (none ends here): the store keeps such keys
				// while it can, up to twice maxKeys (see Memory.add).
				most := maxKeys
				if a, err := algorithms.Lookup(l.Name()); err == nil && a.Lease {
					most = 2 * maxKeys
				}
				if c.held < maxKeys || c.held > most {
					b.Fatalf("store holds %d keys, want %d to %d", c.held, maxKeys, most)
				}
				b.ReportMetric(c.rssPerKey, "RSS-B/key")
				b.ReportMetric(c.heapPerKey, "heap-B/key")
				b.ReportMetric(c.rssMB, "RSS-MiB")
			})
		}
	}
}
