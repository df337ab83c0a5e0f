package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

func pipelinedStore(t *testing.T, c redis.UniversalClient, p *Pipeliner, name string, cfg algorithms.Config, zone string) *Store {
	t.Helper()
	s, err := NewStore(c, mustLimiter(t, name, cfg), Options{KeyPrefix: "rltest:", Zone: zone, Pipeliner: p})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Concurrent Takes through a Pipeliner: coalesced into pipelines, still
// exact (every algorithm admits exactly its limit), one EVALSHA each, and
// the same decisions as unpipelined calls on a timeline.
func TestPipelinerExact(t *testing.T) {
	srv, c := newClient(t)
	p := NewPipeliner(c, 0)
	defer p.Close()
	for _, name := range []string{algorithms.SlidingLog, algorithms.FixedWindow, algorithms.TokenBucket, algorithms.GCRA} {
		s := pipelinedStore(t, c, p, name, oneTier(100, time.Hour), "pipe")
		if _, err := redistest.Do(srv.Addr, "CONFIG", "RESETSTAT"); err != nil {
			t.Fatal(err)
		}
		admitted := takeConcurrently(t, 64, 5, func(int, int) (algorithms.Decision, error) {
			return s.Take(context.Background(), "k", time.Time{}, 1)
		})
		if admitted != 100 {
			t.Errorf("%s: admitted %d of 320, want 100", name, admitted)
		}
		if n := commandStats(t, c)["evalsha"]; n != 320 {
			t.Errorf("%s: %d EVALSHA for 320 Takes", name, n)
		}
	}
}

// A pipelined Take and Undo answer what the unpipelined ones do.
func TestPipelinerSameDecisions(t *testing.T) {
	_, c := newClient(t)
	p := NewPipeliner(c, 0)
	defer p.Close()
	cfg := algorithms.Config{Tiers: []algorithms.Tier{{Events: 3, Window: time.Second}, {Events: 5, Window: time.Minute}}}
	for _, name := range algorithms.Names {
		if name == algorithms.Concurrency {
			cfg = oneTier(3, time.Minute)
		}
		plain := mustStore(t, c, mustLimiter(t, name, cfg), "same-a")
		piped := pipelinedStore(t, c, p, name, cfg, "same-b")
		for i := 0; i < 8; i++ {
			now := t0.Add(time.Duration(i) * 150 * time.Millisecond)
			a, err1 := plain.Take(context.Background(), "k", now, 1)
			b, err2 := piped.Take(context.Background(), "k", now, 1)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			a.Token, b.Token = 0, 0 // concurrency tokens are per store
			if a != b {
				t.Fatalf("%s step %d: plain %+v, pipelined %+v", name, i, a, b)
			}
		}
	}
}

// After a restart Redis has no scripts: the pipeline's EVALSHA gets
// NOSCRIPT and the calls are sent again with EVAL. Close fails later calls.
func TestPipelinerNoScriptAndClose(t *testing.T) {
	srv, c := newClient(t)
	p := NewPipeliner(c, 0)
	s := pipelinedStore(t, c, p, algorithms.GCRA, oneTier(10, time.Minute), "noscript")
	if _, err := s.Take(context.Background(), "k", time.Time{}, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := redistest.Do(srv.Addr, "SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	d, err := s.Take(context.Background(), "k", time.Time{}, 1)
	if err != nil || !d.Allowed || d.Remaining != 8 {
		t.Fatalf("after SCRIPT FLUSH: %+v, %v", d, err)
	}
	p.Close()
	if _, err := s.Take(context.Background(), "k", time.Time{}, 1); !errors.Is(err, redis.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	p.Close() // twice is fine
}

// A canceled request does not wait for its pipeline.
func TestPipelinerContext(t *testing.T) {
	srv, c := newClient(t)
	p := NewPipeliner(c, 0)
	defer p.Close()
	s := pipelinedStore(t, c, p, algorithms.GCRA, oneTier(10, time.Minute), "ctx")
	srv.Pause()
	defer srv.Resume()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := s.Take(ctx, "k", time.Time{}, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("paused Redis: %v, want the context's deadline", err)
	}
}

func BenchmarkRedisTakePipelined(b *testing.B) {
	_, c := newClient(b)
	p := NewPipeliner(c, 0)
	defer p.Close()
	s, err := NewStore(c, mustLimiter(b, algorithms.GCRA, oneTier(1<<40, time.Second)), Options{KeyPrefix: "rlbench:", Zone: "p", Pipeliner: p})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Take(context.Background(), "k", time.Time{}, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
}
