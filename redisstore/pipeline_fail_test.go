package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

// A pipeline whose connection Redis refuses before any command (a wrong
// password) fails its calls with Redis's answer, not with an empty reply.
func TestPipelinerConnectionRefusedAtAuth(t *testing.T) {
	srv := redistest.StartArgs(t, "--requirepass", "s3cret")
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: "wrong", MaxRetries: -1})
	defer c.Close()
	p := NewPipeliner(c)
	defer p.Close()
	s := pipelinedStore(t, c, p, algorithms.SlidingLog, oneTier(10, time.Minute), "auth")
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		_, err := s.Take(ctx, "k", time.Time{}, 1)
		if err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
			t.Fatalf("Take %d with a wrong password: %v, want WRONGPASS", i+1, err)
		}
	}
	err := s.Undo(ctx, "k", time.Time{}, 1, algorithms.Decision{Allowed: true})
	if err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("Undo with a wrong password: %v, want WRONGPASS", err)
	}
}
