package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestStateAndBlockReadOnce: the algorithms whose state is one string read
// it and the key's block with one MGET a take, not a GET each (a command
// inside a script costs Redis about as much as the script's own logic).
func TestStateAndBlockReadOnce(t *testing.T) {
	perAlgorithm(t, func(t *testing.T, ctx context.Context, c *redis.Client, name string) {
		if scripts[name].layout == "" { // concurrency: a hash and a sorted set
			t.Skip("the state is not one string")
		}
		s := blockStore(t, c, name, oneTier(100, time.Second), "readonce-"+name, time.Minute)
		if _, err := s.Take(ctx, "k", t0, 1); err != nil {
			t.Fatal(err)
		}
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		const takes = 3
		for i := range takes {
			if d, err := s.Take(ctx, "k", t0.Add(time.Duration(i+1)*time.Millisecond), 1); err != nil || !d.Allowed {
				t.Fatalf("take %d: %+v, %v", i, d, err)
			}
		}
		stats := commandStats(t, c)
		if stats["mget"] != takes || stats["get"] != 0 {
			t.Errorf("%d takes ran %d MGET and %d GET, want %d and 0", takes, stats["mget"], stats["get"], takes)
		}
	})
}
