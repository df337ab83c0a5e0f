package store

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
)

// floodKeys is how many distinct keys TestMemoryFlood sends through
// fixed_window (the cheapest state, so the full million stays within a few
// seconds under -race); the other algorithms get floodKeysOthers, still
// twenty times MaxKeys (the bound is the same code path for every
// algorithm, only the state differs).
const (
	floodKeys       = 1_000_000
	floodKeysOthers = 200_000
	floodMaxKeys    = 10_000
)

// heapAfterGC returns the live heap after a full collection.
func heapAfterGC() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC() // the second one frees what the first one's finalizers/cleanups released
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// floodKey writes the decimal form of i into buf and returns it as a new
// string (what the store keeps).
func floodKey(buf []byte, prefix byte, i int) ([]byte, string) {
	buf = append(buf[:0], prefix)
	buf = strconv.AppendInt(buf, int64(i), 10)
	return buf, string(buf)
}

// TestMemoryFlood sends a flood of distinct keys (a spoofed-address flood)
// through a store with MaxKeys = 10,000, for every algorithm: the store
// never holds more than MaxKeys keys (checked all along by a goroutine
// calling Len while the flood runs, and at the end), it holds exactly
// MaxKeys at the end, the newest key kept its state while the oldest was
// evicted (and starts afresh), and the live heap after the flood is
// bounded by what MaxKeys keys cost (measured on a fresh store of the same
// algorithm), twice over plus 1 MiB.
func TestMemoryFlood(t *testing.T) {
	ctx := context.Background()
	for _, name := range algorithms.Names {
		n := floodKeysOthers
		if name == algorithms.FixedWindow {
			n = floodKeys
		}
		t.Run(name, func(t *testing.T) {
			l, err := algorithms.New(name, algorithms.Config{
				Tiers: []algorithms.Tier{{Events: 100, Window: time.Hour}},
			})
			if err != nil {
				t.Fatal(err)
			}
			opts := MemoryOptions{MaxKeys: floodMaxKeys, SweepInterval: time.Hour}
			alg, _ := algorithms.Lookup(name)
			inFlight := alg.Lease
			var buf []byte

			// What MaxKeys keys cost, key strings included: a store that
			// holds MaxKeys keys without evicting (its bound is larger:
			// the bound is per shard, so MaxKeys random keys would
			// overflow some shards of a store bounded at MaxKeys).
			before := heapAfterGC()
			ref := NewMemory(l, MemoryOptions{MaxKeys: 4 * floodMaxKeys, SweepInterval: time.Hour})
			for k := range floodMaxKeys {
				var key string
				buf, key = floodKey(buf, 'r', k)
				ref.Take(ctx, key, t0, 1)
			}
			full := heapAfterGC()
			if ref.Len() != floodMaxKeys {
				t.Fatalf("reference store holds %d keys, want %d", ref.Len(), floodMaxKeys)
			}
			ref.Destruct()
			runtime.KeepAlive(ref)
			ref = nil
			perKey := float64(int64(full)-int64(before)) / floodMaxKeys
			if perKey <= 0 {
				t.Fatalf("measured %.1f bytes per key", perKey)
			}

			base := heapAfterGC()
			m := newTestMemory(t, l, opts)

			// A watcher that calls Len again and again during the flood.
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var maxSeen, polls int
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					maxSeen = max(maxSeen, m.Len())
					polls++
					time.Sleep(50 * time.Microsecond) // pacing, not an assertion
				}
			})

			// The flood, from two goroutines over disjoint halves of the
			// keys (the store is concurrent; two cores halve the time).
			// Each records its first and last key, and the order in which
			// they finished.
			start := time.Now()
			const workers = 2
			firsts, lasts := make([]string, workers), make([]string, workers)
			errs := make([]string, workers)
			var finished atomic.Int32
			lastDone := -1
			var flood sync.WaitGroup
			for w := range workers {
				flood.Go(func() {
					var buf []byte
					for k := w * n / workers; k < (w+1)*n/workers; k++ {
						var key string
						buf, key = floodKey(buf, 'k', k)
						if firsts[w] == "" {
							firsts[w] = key
						}
						lasts[w] = key
						d, _ := m.Take(ctx, key, t0, 1)
						if !d.Allowed || d.Remaining != 99 {
							errs[w] = fmt.Sprintf("key %d: first Take of a new key: allowed %v remaining %d, want true 99", k, d.Allowed, d.Remaining)
							return
						}
						if inFlight && k != (w+1)*n/workers-1 {
							// The flood's requests end; a key with one in
							// flight is not evicted (TestMemoryKeepsKeysInFlight).
							m.Undo(ctx, key, t0, 1, d)
						}
					}
					if finished.Add(1) == workers {
						lastDone = w
					}
				})
			}
			flood.Wait()
			elapsed := time.Since(start)
			close(stop)
			wg.Wait()
			for _, e := range errs {
				if e != "" {
					t.Fatal(e)
				}
			}

			if maxSeen > floodMaxKeys {
				t.Errorf("Len reached %d during the flood, MaxKeys is %d", maxSeen, floodMaxKeys)
			}
			if got := m.Len(); got != floodMaxKeys {
				t.Errorf("after %d distinct keys the store holds %d, want exactly MaxKeys %d", n, got, floodMaxKeys)
			}
			heap := heapAfterGC()
			grown := int64(heap) - int64(base)
			bound := int64(2*perKey*floodMaxKeys) + 1<<20
			if grown > bound {
				t.Errorf("heap grew %d bytes over the flood of %d keys, bound %d (2 x %d keys x %.0f B/key + 1 MiB)",
					grown, n, bound, floodMaxKeys, perKey)
			}

			// The newest key (the last of the worker that finished last)
			// kept its state: a second Take sees the first. The oldest keys
			// were evicted and start afresh.
			if d, _ := m.Take(ctx, lasts[lastDone], t0, 1); !d.Allowed || d.Remaining != 98 {
				t.Errorf("newest key %s: allowed %v remaining %d, want true 98 (its state kept)", lasts[lastDone], d.Allowed, d.Remaining)
			}
			for w := range workers {
				if d, _ := m.Take(ctx, firsts[w], t0, 1); !d.Allowed || d.Remaining != 99 {
					t.Errorf("oldest key %s: allowed %v remaining %d, want true 99 (evicted, fresh)", firsts[w], d.Allowed, d.Remaining)
				}
			}
			if got := m.Len(); got != floodMaxKeys {
				t.Errorf("after re-adding an evicted key: Len %d, want %d", got, floodMaxKeys)
			}
			runtime.KeepAlive(m)
			t.Logf("%s: %d keys in %v (%.0f ns/key), Len polled %d times (max %d); %.0f B/key at the bound; heap +%d B after the flood (bound %d)",
				name, n, elapsed.Round(time.Millisecond), float64(elapsed.Nanoseconds())/float64(n), polls, maxSeen, perKey, grown, bound)
		})
	}
}
