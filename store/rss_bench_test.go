package store

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"testing"
	"time"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
)

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
	held            int     // keys held at the end
	rssPerKey       float64 // resident set growth per held key
	heapPerKey      float64 // live heap growth per held key
	rssMB, heapMB   float64 // the growths themselves, MiB
	rssOverHeapPct  float64 // rssPerKey over heapPerKey, in percent
	keyLen, flooded int
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
	c := floodCost{held: m.Len(), keyLen: keyLen, flooded: n}
	c.rssMB = float64(rss1-rss0) / (1 << 20)
	c.heapMB = float64(int64(ms.HeapAlloc)-int64(heap0)) / (1 << 20)
	c.rssPerKey = float64(rss1-rss0) / float64(c.held)
	c.heapPerKey = float64(int64(ms.HeapAlloc)-int64(heap0)) / float64(c.held)
	c.rssOverHeapPct = 100 * c.rssPerKey / c.heapPerKey
	m.Destruct()
	runtime.KeepAlive(m)
	return c, nil
}

// BenchmarkMemoryRSSPerKey floods 200,000 distinct keys into a store
// bounded at 100,000 (so that it evicts, as under a real flood) for each
// algorithm, one tier of 100 events per minute, one request per key, and
// reports the resident set and the live heap each held key costs, key
// string included (keys of 16 bytes, like an IPv6 address's text, and of
// 256 bytes, the longest the handler keeps as is). Run it with
// -benchtime=1x: an op is a whole flood.
func BenchmarkMemoryRSSPerKey(b *testing.B) {
	if _, err := rss(); err != nil {
		b.Skip(err)
	}
	const maxKeys, n = 100_000, 200_000
	for _, name := range algorithms.Names {
		l, err := algorithms.New(name, algorithms.Config{
			Tiers: []algorithms.Tier{{Events: 100, Window: time.Minute}},
		})
		if err != nil {
			b.Fatal(err)
		}
		for _, keyLen := range []int{16, 256} {
			b.Run(fmt.Sprintf("%s/key%d", name, keyLen), func(b *testing.B) {
				var c floodCost
				for range b.N {
					if c, err = measureFlood(l, maxKeys, n, keyLen); err != nil {
						b.Fatal(err)
					}
				}
				if c.held != maxKeys {
					b.Fatalf("store holds %d keys, want %d", c.held, maxKeys)
				}
				b.ReportMetric(c.rssPerKey, "RSS-B/key")
				b.ReportMetric(c.heapPerKey, "heap-B/key")
				b.ReportMetric(c.rssMB, "RSS-MiB")
			})
		}
	}
}
