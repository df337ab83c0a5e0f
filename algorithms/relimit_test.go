package algorithms

import (
	"testing"
	"time"
)

// relimitT0 is the start of a minute, so that the windows of a minute are
// aligned to it.
var relimitT0 = time.Unix(1_700_000_040, 0)

func relimitLimiter(t *testing.T, name string, tiers ...Tier) Limiter {
	t.Helper()
	l, err := New(name, Config{Tiers: tiers})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// relimitEach runs f as a subtest per algorithm with its limiters of one
// tier, a and b, and a new state of a's.
func relimitEach(t *testing.T, a, b Tier, f func(t *testing.T, name string, la, lb Limiter, s State)) {
	for _, name := range Names {
		t.Run(name, func(t *testing.T) {
			la, lb := relimitLimiter(t, name, a), relimitLimiter(t, name, b)
			f(t, name, la, lb, la.NewState())
		})
	}
}

// TestRelimitRaise: a key that used 60 of 100 and is then held to 1000
// has 940 left, whatever the algorithm.
func TestRelimitRaise(t *testing.T) {
	relimitEach(t, Tier{100, time.Minute}, Tier{1000, time.Minute}, func(t *testing.T, name string, from, to Limiter, s State) {
		if d := s.Take(relimitT0, 60); !d.Allowed || d.Remaining != 40 {
			t.Fatalf("take 60 of 100: %+v", d)
		}
		s.(Relimiter).Relimit(relimitT0, to)
		if d := s.Take(relimitT0, 0); !d.Allowed || d.Limit != 1000 || d.Remaining != 940 {
			t.Fatalf("after raising to 1000: %+v, want 940 remaining of 1000", d)
		}
		if d := s.Take(relimitT0, 940); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("take the 940 left: %+v", d)
		}
		if d := s.Take(relimitT0, 1); d.Allowed {
			t.Fatalf("a 1001st unit: %+v", d)
		}
	})
}

// TestRelimitLower: a key that used 90 of 100 and is then held to 50 is
// denied until enough of what it used has left, not given a fresh quota.
func TestRelimitLower(t *testing.T) {
	// The wait of one unit at +1s: the window algorithms and concurrency
	// until the 90 units leave (concurrency's retry is capped at 1s), the
	// buckets one unit of the new rate (full at 50: 60s/50).
	wantRetry := map[string]time.Duration{
		SlidingLog:  59 * time.Second,
		FixedWindow: 59 * time.Second,
		TokenBucket: 1200 * time.Millisecond,
		LeakyBucket: 1200 * time.Millisecond,
		GCRA:        1200 * time.Millisecond,
		Concurrency: time.Second,
	}
	relimitEach(t, Tier{100, time.Minute}, Tier{50, time.Minute}, func(t *testing.T, name string, from, to Limiter, s State) {
		if d := s.Take(relimitT0, 90); !d.Allowed {
			t.Fatalf("take 90 of 100: %+v", d)
		}
		at := relimitT0.Add(time.Second)
		s.(Relimiter).Relimit(at, to)
		d := s.Take(at, 1)
		if d.Allowed || d.Limit != 50 || d.Remaining != 0 {
			t.Fatalf("after lowering to 50: %+v, want denied with 0 of 50 remaining", d)
		}
		if w, ok := wantRetry[name]; ok && d.RetryAfter != w {
			t.Errorf("RetryAfter %v, want %v", d.RetryAfter, w)
		}
		if name != Concurrency {
			if e := s.Take(at.Add(d.RetryAfter-time.Microsecond), 1); e.Allowed {
				t.Fatalf("admitted 1µs before its RetryAfter %v: %+v", d.RetryAfter, e)
			}
			if e := s.Take(at.Add(d.RetryAfter), 1); !e.Allowed {
				t.Fatalf("denied at its RetryAfter %v: %+v", d.RetryAfter, e)
			}
		} else if e := s.Take(relimitT0.Add(time.Minute), 1); !e.Allowed {
			t.Fatalf("denied once the leases expired: %+v", e)
		}
	})
}

// TestRelimitTiers: tiers are matched by index; an added tier starts
// empty, a removed one is forgotten, and a Limiter of another algorithm
// changes nothing.
func TestRelimitTiers(t *testing.T) {
	for _, name := range Names {
		if name == Concurrency {
			continue // one tier only
		}
		t.Run(name, func(t *testing.T) {
			one := relimitLimiter(t, name, Tier{10, time.Minute})
			two := relimitLimiter(t, name, Tier{10, time.Minute}, Tier{100, time.Hour})
			s := one.NewState()
			s.Take(relimitT0, 4)
			s.(Relimiter).Relimit(relimitT0, two)
			d := s.Take(relimitT0, 1)
			if !d.Allowed || d.Tier != 0 || d.Remaining != 5 {
				t.Fatalf("with a tier added: %+v, want tier 0 with 5 left", d)
			}
			if d := s.Take(relimitT0, 5); !d.Allowed || d.Tier != 0 || d.Remaining != 0 {
				t.Fatalf("%+v", d)
			}
			// Tier 1 counted only what came after it was added: 6 of 100.
			three := relimitLimiter(t, name, Tier{1000, time.Minute}, Tier{100, time.Hour})
			s.(Relimiter).Relimit(relimitT0, three)
			if d := s.Take(relimitT0, 0); d.Tier != 1 || d.Remaining != 94 {
				t.Fatalf("tier 1 under %v: %+v, want 94 left", three.Config().Tiers, d)
			}
			// Removed, then added again: it starts empty.
			s.(Relimiter).Relimit(relimitT0, relimitLimiter(t, name, Tier{1000, time.Minute}))
			s.(Relimiter).Relimit(relimitT0, three)
			if d := s.Take(relimitT0, 0); d.Tier != 1 || d.Remaining != 100 {
				t.Fatalf("tier 1 removed and added again: %+v, want 100 left", d)
			}
			other := relimitLimiter(t, Concurrency, Tier{1, time.Minute})
			s.(Relimiter).Relimit(relimitT0, other)
			if d := s.Take(relimitT0, 0); d.Limit != 100 || d.Remaining != 100 {
				t.Fatalf("after a Limiter of another algorithm: %+v", d)
			}
		})
	}
}

// TestRelimitAlternate: a key taken alternately under two limits decides
// each Take on everything it used under either: 10 per minute and 20 per
// minute alternating admit 20 units in a minute, the last 10 of them only
// under 20; a bucket, capped at 10 units under 10 per minute, forgets what
// it held beyond, so that 20 per minute then admits 5 more.
func TestRelimitAlternate(t *testing.T) {
	relimitEach(t, Tier{10, time.Minute}, Tier{20, time.Minute}, func(t *testing.T, name string, lo, hi Limiter, s State) {
		r := s.(Relimiter)
		admitted := map[Limiter]int{}
		for i := range 40 {
			l := lo
			if i%2 == 1 {
				l = hi
			}
			r.Relimit(relimitT0, l)
			if s.Take(relimitT0, 1).Allowed {
				admitted[l]++
			}
		}
		want := 15
		if UsesBurst(name) {
			want = 20
		}
		if admitted[lo] != 5 || admitted[hi] != want {
			t.Fatalf("admitted %d under 10/min and %d under 20/min, want 5 and %d", admitted[lo], admitted[hi], want)
		}
	})
}

// TestBucketConvert: a level changes unit exactly while the reduced scales'
// product is below 2^53, in whole units rounded up beyond, and never
// exceeds the new capacity.
func TestBucketConvert(t *testing.T) {
	a := bktTier{scale: 10, cap: 1000, burst: 100}
	b := bktTier{scale: 4, cap: 400, burst: 100}
	if got := bktConvert(25, &a, &b); got != 10 {
		t.Errorf("25 of scale 10 in scale 4: %d, want 10", got)
	}
	if got := bktConvert(26, &a, &b); got != 11 { // 10.4 rounded up
		t.Errorf("26 of scale 10 in scale 4: %d, want 11", got)
	}
	if got := bktConvert(1900, &a, &b); got != 400 {
		t.Errorf("over capacity: %d, want 400", got)
	}
	big1 := bktTier{scale: 1<<30 + 1, cap: (1<<30 + 1) * 4, burst: 4}
	big2 := bktTier{scale: 1 << 30, cap: (1 << 30) * 4, burst: 4}
	if got := bktConvert(1, &big1, &big2); got != 1<<30 {
		t.Errorf("inexact scales: %d, want one whole unit %d", got, 1<<30)
	}
}
