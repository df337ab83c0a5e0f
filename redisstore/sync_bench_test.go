package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
)

// BenchmarkSyncTake: a Take on a held key touches no network and allocates
// nothing; Redis is only needed for the syncs, which the benchmark leaves
// out (no client is ever dialled).
func BenchmarkSyncTake(b *testing.B) {
	c := idleClient(b)
	for _, name := range []string{algorithms.FixedWindow, algorithms.SlidingWindow} {
		b.Run(name, func(b *testing.B) {
			cfg := algorithms.Config{Tiers: []algorithms.Tier{{Events: 1 << 40, Window: time.Minute}, {Events: 1 << 40, Window: time.Hour}}}
			l, err := algorithms.New(name, cfg)
			if err != nil {
				b.Fatal(err)
			}
			s, err := newSyncStore(c, l, Options{Zone: "bench"}, SyncOptions{Interval: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			keys := make([]string, 1024)
			for i := range keys {
				keys[i] = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
			}
			ctx := context.Background()
			now := time.Now()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if _, err := s.Take(ctx, keys[i&1023], now, 1); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		})
	}
}

// BenchmarkSyncTakeNewKeys: a Take on a key not held, in a full store,
// every key counting: the eviction path (each Take adds a key and, once
// the store is full, evicts one).
func BenchmarkSyncTakeNewKeys(b *testing.B) {
	c := idleClient(b)
	cfg := algorithms.Config{Tiers: []algorithms.Tier{{Events: 1 << 40, Window: time.Minute}, {Events: 1 << 40, Window: time.Hour}}}
	l, err := algorithms.New(algorithms.SlidingWindow, cfg)
	if err != nil {
		b.Fatal(err)
	}
	s, err := newSyncStore(c, l, Options{Zone: "bench"}, SyncOptions{Interval: time.Hour, MaxKeys: 1024})
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	ctx := context.Background()
	now := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.Take(ctx, keys[i&(1<<16-1)], now, 1); err != nil {
			b.Fatal(err)
		}
	}
}
