package ratelimit

import (
	"slices"
	"testing"
	"time"
)

// Each pending release has its own backoff, on synthetic instants: tried
// releaseRetryFirst after it was queued, then twice as late each time up
// to releaseRetryMost; an open breaker costs no backoff (looked at again
// every releaseRetryFirst, so the release goes out within that of the
// breaker closing); one queued behind a release that failed for minutes
// is tried releaseRetryFirst after it was queued; one whose lease has
// expired is dropped untried; the queue's goroutine stops once it is empty.
func TestPendingReleasesSchedule(t *testing.T) {
	var p pendingReleases
	t0 := time.Unix(1_000_000_000, 0)
	outcome := map[string]tried{}
	var keys []string
	try := func(it *pendingRelease) tried {
		keys = append(keys, it.t.key)
		return outcome[it.t.key]
	}
	// pass runs a pass at t0+now and checks which keys it tried and when
	// the next is due (0: the queue is empty).
	pass := func(now time.Duration, wantTried []string, wantNext time.Duration) {
		t.Helper()
		keys = nil
		next, ok := p.pass(t0.Add(now), try)
		got := time.Duration(0)
		if ok {
			got = next.Sub(t0)
		}
		if !slices.Equal(keys, wantTried) || got != wantNext {
			t.Fatalf("pass at %v: tried %v, next at %v; want %v and %v", now, keys, got, wantTried, wantNext)
		}
	}
	add := func(now time.Duration, key string, keep time.Duration) (start bool) {
		t.Helper()
		queued, _, start := p.add(t0.Add(now), pendingRelease{t: taken{key: key}}, keep)
		if !queued {
			t.Fatalf("%s not queued", key)
		}
		return start
	}

	if !add(0, "a", time.Hour) {
		t.Fatal("the first item started no goroutine")
	}
	outcome["a"] = triedFailed
	pass(100*time.Millisecond, nil, 250*time.Millisecond)
	at, wait := 250*time.Millisecond, releaseRetryFirst
	for wait < releaseRetryMost {
		wait = min(2*wait, releaseRetryMost)
		pass(at, []string{"a"}, at+wait)
		at += wait
	}
	pass(at, []string{"a"}, at+releaseRetryMost) // at most releaseRetryMost apart

	// The breaker opens: looked at every releaseRetryFirst, no backoff.
	at += releaseRetryMost
	outcome["a"] = triedBlocked
	for range 3 {
		pass(at, []string{"a"}, at+releaseRetryFirst)
		at += releaseRetryFirst
	}

	// An item queued now is due after releaseRetryFirst, whatever a's
	// backoff; the running goroutine is woken, not another started.
	outcome["a"] = triedFailed
	pass(at, []string{"a"}, at+releaseRetryMost)
	if add(at+time.Second, "b", time.Hour) {
		t.Fatal("a second goroutine for b")
	}
	select {
	case <-p.kick:
	default:
		t.Fatal("the goroutine was not woken for b")
	}
	outcome["b"] = triedDone
	pass(at+time.Second, nil, at+time.Second+releaseRetryFirst)
	pass(at+time.Second+releaseRetryFirst, []string{"b"}, at+releaseRetryMost)

	// An item whose lease expired leaves untried.
	add(at+2*time.Second, "c", time.Second)
	pass(at+3*time.Second+time.Microsecond, nil, at+releaseRetryMost)

	// a given back at last: the queue is empty, the goroutine stops.
	outcome["a"] = triedDone
	pass(at+releaseRetryMost, []string{"a"}, 0)
	if p.pending() != 0 || p.running {
		t.Fatalf("%d pending, running %v after the last was given back", p.pending(), p.running)
	}
}

// Beyond maxPendingReleases a release is dropped; the first drop since
// the queue last had room is reported once (a warning), then again only
// after the queue had room.
func TestPendingReleasesBound(t *testing.T) {
	var p pendingReleases
	now := time.Unix(1_000_000_000, 0)
	for range maxPendingReleases {
		p.add(now, pendingRelease{}, time.Hour)
	}
	for i, wantFirst := range []bool{true, false, false} {
		queued, first, _ := p.add(now, pendingRelease{}, time.Hour)
		if queued || first != wantFirst {
			t.Fatalf("add %d beyond the bound: queued %v, first drop %v; want false and %v", i+1, queued, first, wantFirst)
		}
	}
	p.pass(now.Add(2*time.Hour), func(*pendingRelease) tried { return triedDone }) // all expired: room again
	for range maxPendingReleases {
		p.add(now, pendingRelease{}, time.Hour)
	}
	if _, first, _ := p.add(now, pendingRelease{}, time.Hour); !first {
		t.Fatal("a drop after the queue had room again was not reported")
	}
}
