package breaker

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zonelimit/caddy-ratelimit/internal/storetest"
)

// Err tells why the breaker is open: the tripping failure's error, then the
// latest failed probe's; nil once closed.
func TestErr(t *testing.T) {
	noProbers(t)
	errProbe := errors.New("NOPERM this user has no permissions to run the 'evalsha' command")
	var calls atomic.Int32
	release := make(chan struct{})
	probe := func(ctx context.Context) error {
		if calls.Add(1) == 1 {
			return errProbe
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var seen error
	var b *Breaker
	b = New(Options{Failures: 2, ProbeInterval: time.Millisecond, Probe: probe,
		OnStateChange: func(from, to State) {
			if to == Open {
				seen = b.Err() // allowed while the breaker holds its lock
			}
		}})
	defer b.Close()
	if err := b.Err(); err != nil {
		t.Fatalf("closed breaker: Err %v, want nil", err)
	}
	b.RecordAt(t0, errors.New("first"))
	b.RecordAt(t0, errDown)
	if !errors.Is(seen, errDown) {
		t.Fatalf("Err in OnStateChange: %v, want the tripping failure's %v", seen, errDown)
	}
	storetest.WaitFor(t, "the second probe", func() bool { return calls.Load() >= 2 })
	if err := b.Err(); !errors.Is(err, errProbe) {
		t.Fatalf("Err after a failed probe: %v, want %v", err, errProbe)
	}
	close(release)
	storetest.WaitFor(t, "the breaker to close", func() bool { return b.State() == Closed })
	if err := b.Err(); err != nil {
		t.Fatalf("Err once closed: %v, want nil", err)
	}
}
