// Command luacalls makes n decisions of one algorithm through the Redis
// store against a Redis server, as the module makes them: the script as the
// store sends it (lib.lua's functions it uses, then the algorithm's file),
// its keys (the key's block included) and arguments. bench/instructions.sh
// runs it against a redis-server under callgrind to count the instructions
// of one script call.
//
//	go run ./bench/luacalls -addr 127.0.0.1:6379 -alg gcra -n 2000
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/redisstore"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "the Redis server")
	alg := flag.String("alg", algorithms.Default, "the algorithm")
	n := flag.Int("n", 2000, "decisions to make, over 1,000 keys")
	flag.Parse()
	if err := run(*addr, *alg, *n); err != nil {
		fmt.Fprintln(os.Stderr, "luacalls:", err)
		os.Exit(1)
	}
}

func run(addr, alg string, n int) error {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
	defer c.Close()
	// One tier whose limit is never reached: every call admits.
	l, err := algorithms.New(alg, algorithms.Config{Tiers: []algorithms.Tier{{Events: 1_000_000_000, Window: time.Minute}}})
	if err != nil {
		return err
	}
	s, err := redisstore.NewStore(c, l, redisstore.Options{KeyPrefix: "rl:", Zone: "bench-" + alg})
	if err != nil {
		return err
	}
	ctx := context.Background()
	for i := range n {
		d, err := s.Take(ctx, strconv.Itoa(i%1000), time.Time{}, 1)
		if err != nil {
			return err
		}
		if !d.Allowed {
			return fmt.Errorf("call %d denied", i)
		}
	}
	return nil
}
