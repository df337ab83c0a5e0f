package ratelimit

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/breaker"
	"github.com/zonelimit/caddy-ratelimit/store"
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

// undoStore answers its Undos with errs in turn (nil once they run out),
// and counts them.
type undoStore struct {
	store.Store
	errs  []error
	undos int
}

func (s *undoStore) Undo(context.Context, string, time.Time, int64, algorithms.Decision) error {
	s.undos++
	if len(s.errs) == 0 {
		return nil
	}
	err := s.errs[0]
	s.errs = s.errs[1:]
	return err
}

// A retry's outcome feeds the breaker of the lease's Redis, as a request's
// call does: with Redis hung and no traffic, a pass sends Failures
// releases, each waiting out its timeout, and the rest wait for the
// breaker to close instead of a timeout each; a retry that succeeds
// resets the breaker's count.
func TestPendingReleasesFeedBreaker(t *testing.T) {
	h := provision(t, `{"zones":[{"name":"z","key":"k","limits":[{"events":5,"window":"1m"}]}]}`, newClock())
	z := h.rt.zones[0]
	b := breaker.New(breaker.Options{Failures: 3, Probe: func(context.Context) error { return errors.New("still down") }})
	defer b.Close()
	z.breaker = b
	timeout := errors.New("i/o timeout")
	now := time.Unix(1_000_000_000, 0)
	run := func(st *undoStore, n int) *pendingReleases {
		t.Helper()
		p := new(pendingReleases)
		for range n {
			p.add(now, pendingRelease{t: taken{z: z, st: st, key: "k", cost: 1}}, time.Hour)
		}
		p.pass(now.Add(releaseRetryFirst), h.tryRelease)
		return p
	}

	// Two failures, a success, two failures: never three in a row.
	st := &undoStore{errs: []error{timeout, timeout, nil, timeout, timeout}}
	if p := run(st, 5); st.undos != 5 || p.pending() != 4 || b.State() != breaker.Closed {
		t.Fatalf("%d undos, %d pending, breaker %v; want 5, 4 and closed", st.undos, p.pending(), b.State())
	}
	b.Record(nil)

	// Redis hung: the third failure opens the breaker, the other 7 are not sent.
	st = &undoStore{errs: slices.Repeat([]error{timeout}, 10)}
	if p := run(st, 10); st.undos != 3 || p.pending() != 10 || b.State() != breaker.Open {
		t.Fatalf("%d undos, %d pending, breaker %v; want 3, 10 and open", st.undos, p.pending(), b.State())
	}
}

// A lease released while its Redis's breaker is open is queued without a
// call (which would only wait for its timeout); a release that fails is
// queued too, and counts toward the breaker.
func TestReleaseLeaseBreaker(t *testing.T) {
	h := provision(t, `{"zones":[{"name":"z","key":"k","limits":[{"events":5,"window":"1m"}]}]}`, newClock())
	z := h.rt.zones[0]
	z.lease = true
	b := breaker.New(breaker.Options{Failures: 2, Probe: func(context.Context) error { return errors.New("still down") }})
	defer b.Close()
	z.breaker = b
	// running: no goroutine retries the queue while the test looks at it.
	h.rt.releases = &pendingReleases{running: true, kick: make(chan struct{}, 1)}
	st := &undoStore{errs: []error{errors.New("i/o timeout"), errors.New("i/o timeout")}}
	z.store = st
	for i, want := range []struct {
		undos, pending int
		state          breaker.State
	}{{1, 1, breaker.Closed}, {2, 2, breaker.Open}, {2, 3, breaker.Open}} {
		h.releaseLease(context.Background(), &taken{z: z, st: st, key: "k", cost: 1})
		if st.undos != want.undos || h.rt.releases.pending() != want.pending || b.State() != want.state {
			t.Fatalf("release %d: %d undos, %d pending, breaker %v; want %d, %d and %v",
				i+1, st.undos, h.rt.releases.pending(), b.State(), want.undos, want.pending, want.state)
		}
	}
}
