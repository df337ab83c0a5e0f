package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
)

// answerStore answers every Take with d and counts the calls.
type answerStore struct {
	d     algorithms.Decision
	takes int
}

func (s *answerStore) Take(context.Context, string, time.Time, int64) (algorithms.Decision, error) {
	s.takes++
	return s.d, nil
}

func (s *answerStore) Undo(context.Context, string, time.Time, int64, algorithms.Decision) error {
	return nil
}

func TestDenyCache(t *testing.T) {
	ctx := context.Background()
	inner := &answerStore{d: algorithms.Decision{Limit: 5, RetryAfter: 2 * time.Second, MoreAfter: 2 * time.Second, ResetAfter: 10 * time.Second}}
	c := NewDenyCache(inner)
	take := func(key string, at time.Time) algorithms.Decision {
		t.Helper()
		d, err := c.Take(ctx, key, at, 1)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	take("k", t0)
	got := take("k", t0.Add(500*time.Millisecond))
	if inner.takes != 1 || got.RetryAfter != 1500*time.Millisecond || got.ResetAfter != 9500*time.Millisecond ||
		got.MoreAfter != 1500*time.Millisecond || got.Limit != 5 || got.Allowed {
		t.Fatalf("after 500ms: %+v after %d calls, want the denial counted down without a call", got, inner.takes)
	}
	if d, ok := c.Denied("k", t0.Add(900*time.Millisecond)); !ok || d.RetryAfter != 1100*time.Millisecond {
		t.Fatalf("Denied after 900ms: %+v, %v", d, ok)
	}
	// From recheck on, the store is asked again (a reset through another
	// instance may have freed the key); without the store, the denial
	// holds until its Retry-After.
	if _, ok := c.Denied("k", t0.Add(recheck)); ok {
		t.Error("denial answered from the cache at its recheck")
	}
	if d, ok := c.TakeHeld("k", t0.Add(1500*time.Millisecond), 1); !ok || d.RetryAfter != 500*time.Millisecond {
		t.Errorf("TakeHeld after 1.5s: %+v, %v, want the denial until its Retry-After", d, ok)
	}
	if _, ok := c.Denied("k", t0.Add(2*time.Second)); ok {
		t.Error("denial still answered at its Retry-After")
	}
	if _, ok := c.Denied("k", t0); ok {
		t.Error("an expired denial came back (time going backwards)")
	}
	take("k", t0.Add(2*time.Second))
	if inner.takes != 2 {
		t.Errorf("%d calls after the denial expired, want 2", inner.takes)
	}

	inner.d = algorithms.Decision{Allowed: true, Limit: 5}
	take("allowed", t0)
	take("allowed", t0)
	if inner.takes != 4 {
		t.Errorf("an admission was cached (%d calls)", inner.takes)
	}
	// A key reset elsewhere: the store admits at the recheck, and the
	// denial kept for TakeHeld is forgotten.
	inner.d = algorithms.Decision{Limit: 5, RetryAfter: time.Minute}
	take("reset", t0)
	inner.d = algorithms.Decision{Allowed: true, Limit: 5}
	if d := take("reset", t0.Add(recheck)); !d.Allowed || inner.takes != 6 {
		t.Errorf("at the recheck after a reset: %+v after %d calls, want the store's admission", d, inner.takes)
	}
	if _, ok := c.TakeHeld("reset", t0.Add(2*recheck), 1); ok {
		t.Error("TakeHeld answered a denial the store has since lifted")
	}

	// A flood of distinct keys stays bounded.
	for i := 0; i < 2*denyKeys; i++ {
		c.put(strconv.Itoa(i), t0, algorithms.Decision{RetryAfter: time.Minute})
	}
	if n := c.denials.Len(); n > denyKeys {
		t.Fatalf("%d keys cached, want at most %d", n, denyKeys)
	}
	var nilCache *DenyCache
	if _, ok := nilCache.Denied("k", t0); ok {
		t.Error("nil cache answered")
	}
}

// TestDenyCacheTakeHeld: without the store, a denial holds until its
// Retry-After, and a block's until the block ends (not only
// recheck, as Denied does), until an admission says it was lifted.
// A denial is answered until it ends, however many shorter ones follow
// it, and once all have ended, a new one is answered again: the cache
// skips its look-up only when no denial can be in force.
func TestDenyCacheLookUpAfterDenialsEnded(t *testing.T) {
	ctx := context.Background()
	inner := &answerStore{}
	c := NewDenyCache(inner)
	if _, ok := c.Denied("k", t0); ok {
		t.Fatal("a denial in a new cache")
	}
	deny := func(key string, at time.Time, retry time.Duration) {
		t.Helper()
		inner.d = algorithms.Decision{Limit: 1, RetryAfter: retry}
		if _, err := c.Ask(ctx, key, at, 1); err != nil {
			t.Fatal(err)
		}
	}
	deny("long", t0, 10*time.Second)
	deny("short", t0.Add(time.Second), 100*time.Millisecond)
	if d, ok := c.TakeHeld("long", t0.Add(5*time.Second), 1); !ok || d.RetryAfter != 5*time.Second {
		t.Fatalf("long denial after a shorter one ended: %+v, %v; want it answered until it ends", d, ok)
	}
	if _, ok := c.TakeHeld("long", t0.Add(10*time.Second), 1); ok {
		t.Fatal("long denial answered when it ended")
	}
	deny("later", t0.Add(20*time.Second), time.Second)
	if d, ok := c.Denied("later", t0.Add(20500*time.Millisecond)); !ok || d.RetryAfter != 500*time.Millisecond {
		t.Fatalf("a denial after all others ended: %+v, %v; want it answered", d, ok)
	}
}

func TestDenyCacheTakeHeld(t *testing.T) {
	ctx := context.Background()
	inner := &answerStore{d: algorithms.Decision{Limit: 5, RetryAfter: 2 * time.Second, ResetAfter: 2 * time.Second}}
	c := NewDenyCache(inner)
	if _, err := c.Take(ctx, "k", t0, 1); err != nil {
		t.Fatal(err)
	}
	if d, ok := c.TakeHeld("k", t0.Add(1500*time.Millisecond), 1); !ok || d.Allowed || d.RetryAfter != 500*time.Millisecond {
		t.Fatalf("TakeHeld 1.5s after a denial of 2s: %+v, %v", d, ok)
	}
	if _, ok := c.TakeHeld("k", t0.Add(2*time.Second), 1); ok {
		t.Fatal("TakeHeld answered at the denial's Retry-After")
	}
	if _, ok := c.TakeHeld("never seen", t0, 1); ok {
		t.Fatal("TakeHeld answered a key never denied")
	}

	inner.d = algorithms.Decision{Limit: 5, RetryAfter: time.Minute, ResetAfter: time.Minute, Blocked: true}
	if _, err := c.Take(ctx, "b", t0, 1); err != nil {
		t.Fatal(err)
	}
	later := t0.Add(30 * time.Second)
	if _, ok := c.Denied("b", later); ok {
		t.Fatal("Denied answered a block past recheck")
	}
	if d, ok := c.TakeHeld("b", later, 1); !ok || !d.Blocked || d.RetryAfter != 30*time.Second {
		t.Fatalf("TakeHeld 30s into a block of 1m: %+v, %v", d, ok)
	}
	if _, ok := c.TakeHeld("b", t0.Add(time.Minute), 1); ok {
		t.Fatal("TakeHeld answered at the block's end")
	}

	// Unblocked elsewhere: the store admits, and the block is forgotten.
	if _, err := c.Take(ctx, "b", t0, 1); err != nil {
		t.Fatal(err)
	}
	inner.d = algorithms.Decision{Allowed: true, Limit: 5}
	if d, err := c.Take(ctx, "b", later, 1); err != nil || !d.Allowed {
		t.Fatalf("after recheck: %+v %v, want the store's admission", d, err)
	}
	if _, ok := c.TakeHeld("b", later, 1); ok {
		t.Fatal("TakeHeld answered a block the store no longer has")
	}
}
