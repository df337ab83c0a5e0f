package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/zonelimit/caddy-ratelimit/breaker"
)

// A store call guarded by a Breaker: ask Allow first, record the outcome,
// and decide without the store while the breaker is open.
func Example() {
	redisDown := errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
	take := func(ctx context.Context) error { return redisDown } // the Redis call

	b := breaker.New(breaker.Options{
		Failures:      3,
		ProbeInterval: time.Hour, // the probe will not run in this example
		Probe:         func(ctx context.Context) error { return redisDown },
		OnStateChange: func(from, to breaker.State) {
			fmt.Printf("redis breaker: %v -> %v\n", from, to) // log, set a gauge
		},
	})
	defer b.Close()

	for i := range 5 {
		if !b.Allow() {
			fmt.Printf("request %d: breaker open, apply on_error\n", i)
			continue
		}
		err := take(context.Background())
		b.Record(err)
		fmt.Printf("request %d: %v\n", i, err != nil)
	}
	// Output:
	// request 0: true
	// request 1: true
	// redis breaker: closed -> open
	// request 2: true
	// request 3: breaker open, apply on_error
	// request 4: breaker open, apply on_error
}
