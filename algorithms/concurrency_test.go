package algorithms

import (
	"testing"
	"time"
)

func TestBktConcurrency(t *testing.T) {
	sec, ms, us := time.Second, bktTms, bktTus
	cases := []bktTCase{
		{"two in flight", Config{Tiers: []Tier{{2, 10 * sec}}}, []bktTStep{
			{op: "idle"},
			{cost: 1, want: bktTAllow(0, 2, 1, 10*sec)},
			{cost: 1, want: bktTAllow(0, 2, 0, 10*sec)},
			// we cannot know when a request ends: retry within a second.
			{cost: 1, want: bktTDeny(0, 2, 0, 10*sec, sec)},
			{at: sec, op: "undo", ref: 1},
			{at: sec, op: "undo", ref: 1}, // twice: no-op
			{at: sec, op: "undo", ref: 3}, // denied: no-op
			{at: sec, cost: 1, want: bktTAllow(0, 2, 0, 10*sec)},
			{at: 10 * sec, op: "busy"}, // the first lease expired, not the one of 1s
			{at: 10 * sec, cost: 1, want: bktTAllow(0, 2, 0, 10*sec)},
			{at: 20*sec - us, op: "busy"},
			{at: 20 * sec, op: "idle"},
		}},
		{"idle when the last lease left ends", Config{Tiers: []Tier{{3, 10 * sec}}}, []bktTStep{
			{cost: 1, want: bktTAllow(0, 3, 2, 10*sec)},
			{at: sec, cost: 1, want: bktTAllow(0, 3, 1, 10*sec)},
			{at: 2 * sec, op: "undo", ref: 1}, // the lease that ends last
			{at: 10*sec - us, op: "busy"},
			{at: 10 * sec, op: "idle"},         // not 11s
			{at: 10 * sec, op: "undo", ref: 0}, // expired: no-op
			{at: 12 * sec, cost: 1, want: bktTAllow(0, 3, 2, 10*sec)},
			{at: 12 * sec, op: "undo", ref: 6},
			{at: 12 * sec, op: "idle"}, // none left
		}},
		{"leases expire", Config{Tiers: []Tier{{2, 500 * ms}}}, []bktTStep{
			{cost: 1, want: bktTAllow(0, 2, 1, 500*ms)},
			{at: 100 * ms, cost: 1, want: bktTAllow(0, 2, 0, 500*ms)},
			{at: 200 * ms, cost: 1, want: bktTDeny(0, 2, 0, 400*ms, 300*ms)},
			{at: 500*ms - us, cost: 1, want: bktTDeny(0, 2, 0, 100*ms+us, us)},
			{at: 500 * ms, cost: 1, want: bktTAllow(0, 2, 0, 500*ms)},
			{at: 600 * ms, cost: 1, want: bktTAllow(0, 2, 0, 500*ms)}, // the lease of 100ms expired
		}},
		{"cost", Config{Tiers: []Tier{{3, 500 * ms}}}, []bktTStep{
			{cost: 2, want: bktTAllow(0, 3, 1, 500*ms)},
			{at: 100 * ms, cost: 1, want: bktTAllow(0, 3, 0, 500*ms)},
			{at: 200 * ms, cost: 2, want: bktTDeny(0, 3, 0, 400*ms, 300*ms)},
			{at: 200 * ms, op: "undo", ref: 0},
			{at: 200 * ms, cost: 2, want: bktTAllow(0, 3, 0, 500*ms)},
			{at: 200 * ms, cost: 0, want: bktTAllow(0, 3, 0, 500*ms)},
		}},
		{"retry when enough leases expire", Config{Tiers: []Tier{{3, 500 * ms}}}, []bktTStep{
			{cost: 1, want: bktTAllow(0, 3, 2, 500*ms)},
			{at: 100 * ms, cost: 1, want: bktTAllow(0, 3, 1, 500*ms)},
			{at: 200 * ms, cost: 1, want: bktTAllow(0, 3, 0, 500*ms)},
			{at: 300 * ms, cost: 2, want: bktTDeny(0, 3, 0, 400*ms, 300*ms)},
			{at: 300 * ms, cost: 1, want: bktTDeny(0, 3, 0, 400*ms, 200*ms)},
			{at: 600 * ms, cost: 2, want: bktTAllow(0, 3, 0, 500*ms)},
		}},
		{"cost above the limit", Config{Tiers: []Tier{{2, 10 * sec}}}, []bktTStep{
			{cost: 3, want: bktTDeny(0, 2, 2, 0, 10*sec)},
			{op: "idle"},
		}},
		{"expired token", Config{Tiers: []Tier{{1, sec}}}, []bktTStep{
			{cost: 1, want: bktTAllow(0, 1, 0, sec)},
			{at: 2 * sec, cost: 1, want: bktTAllow(0, 1, 0, sec)},
			{at: 2 * sec, op: "undo", ref: 0}, // expired: must not release the lease of 2s
			{at: 2 * sec, cost: 1, want: bktTDeny(0, 1, 0, sec, sec)},
			{at: 2 * sec, op: "undo", ref: 1},
			{at: 2 * sec, op: "idle"},
		}},
		{"a billion in flight", Config{Tiers: []Tier{{1e9, time.Minute}}}, []bktTStep{
			{cost: 1e9 - 1, want: bktTAllow(0, 1e9, 1, time.Minute)},
			{cost: 2, want: bktTDeny(0, 1e9, 1, time.Minute, sec)},
			{cost: 1, want: bktTAllow(0, 1e9, 0, time.Minute)},
		}},
	}
	bktTRunCases(t, Concurrency, append(cases, bktTBackwards))
}

func TestBktConcurrencyTokens(t *testing.T) {
	l := bktTNew(t, Concurrency, Config{Tiers: []Tier{{1000, time.Second}}})
	s := l.NewState()
	var last uint64
	for i := 0; i < 100; i++ {
		now := bktT0.Add(time.Duration(i/10) * time.Microsecond)
		d := s.Take(now, 1)
		if !d.Allowed || d.Token == 0 || d.Token <= last || d.Token < uint64(now.UnixMicro()) {
			t.Fatalf("take %d: token %d after %d", i, d.Token, last)
		}
		last = d.Token
	}
	if d := s.Take(bktT0, 0); !d.Allowed || d.Token != 0 {
		t.Errorf("cost 0: %+v, want admitted without a lease", d)
	}
	// A state swept and recreated later never reuses a token of the old one.
	s2 := l.NewState()
	if d := s2.Take(bktT0.Add(time.Second), 1); d.Token <= last {
		t.Errorf("recreated state: token %d, not above %d", d.Token, last)
	}
	s.Undo(bktT0, 1, Decision{Allowed: true, Token: 12345}) // unknown: no-op
	if d := s.Take(bktT0.Add(20*time.Microsecond), 1); d.Remaining != 1000-101 {
		t.Errorf("after an unknown token: %+v", d)
	}
}

func TestBktConcurrencyConfig(t *testing.T) {
	for _, cfg := range []Config{
		{Tiers: []Tier{{1, time.Second}, {2, time.Minute}}},
		{Tiers: []Tier{{1, time.Second}}, Burst: 2},
		{Tiers: []Tier{{1, time.Second}}, CountRejected: true},
	} {
		if _, err := New(Concurrency, cfg); err == nil {
			t.Errorf("New(concurrency, %+v) accepted", cfg)
		}
	}
}

// TestBktConcurrencyRetryAfter: with leases shorter than a second and no
// request ending, a denied request passes at RetryAfter, not 1µs before.
func TestBktConcurrencyRetryAfter(t *testing.T) {
	l := bktTNew(t, Concurrency, Config{Tiers: []Tier{{4, 700 * time.Millisecond}}})
	var ops []bktTOp
	at := int64(0)
	checked := 0
	for i := 0; i < 200; i++ {
		at += int64(i*7919) % 90000
		cost := 1 + int64(i%3)
		d := bktTReplay(l, ops).Take(bktT0.Add(time.Duration(at)*bktTus), cost)
		ops = append(ops, bktTOp{at, cost})
		if d.Allowed {
			continue
		}
		checked++
		ra := int64(d.RetryAfter / bktTus)
		if d2 := bktTReplay(l, ops).Take(bktT0.Add(time.Duration(at+ra)*bktTus), cost); !d2.Allowed {
			t.Fatalf("step %d: denied at RetryAfter %v: %+v", i, d.RetryAfter, d2)
		}
		if d2 := bktTReplay(l, ops).Take(bktT0.Add(time.Duration(at+ra-1)*bktTus), cost); d2.Allowed {
			t.Fatalf("step %d: admitted before RetryAfter %v", i, d.RetryAfter)
		}
	}
	if checked < 20 {
		t.Fatalf("only %d denials", checked)
	}
}

func BenchmarkBktConcurrency(b *testing.B) {
	// Every Take is followed by the Undo of its lease (the request ends).
	b.Run("release", func(b *testing.B) { bktTBench(b, Concurrency, Config{Tiers: []Tier{{100, time.Second}}}) })
	// Leases are never released and expire: 100 live at a time.
	b.Run("expire", func(b *testing.B) {
		l := bktTNew(b, Concurrency, Config{Tiers: []Tier{{100, time.Millisecond}}})
		s := l.NewState()
		b.ReportAllocs()
		now := bktT0
		for i := 0; i < b.N; i++ {
			now = now.Add(bktTus)
			s.Take(now, 1)
		}
	})
}

// TestConcurrencyShortenedWindow: a lease taken after the window was
// shortened expires before the leases already held, and is kept in expiry
// order among them: it is dropped at its own expiry, the others at theirs,
// and its token still gives it back.
func TestConcurrencyShortenedWindow(t *testing.T) {
	long := relimitLimiter(t, Concurrency, Tier{10, time.Minute})
	short := relimitLimiter(t, Concurrency, Tier{10, time.Second})
	s := long.NewState()
	s.Take(relimitT0, 1)                  // expires at +60s
	s.Take(relimitT0.Add(time.Second), 2) // at +61s
	s.(Relimiter).Relimit(relimitT0, short)
	at := relimitT0.Add(2 * time.Second)
	a := s.Take(at, 3) // at +3s, before both
	if !a.Allowed || a.Remaining != 4 || a.ResetAfter != 59*time.Second || a.MoreAfter != time.Second {
		t.Fatalf("take under the shortened window: %+v, want 4 left, reset in 59s, more in 1s", a)
	}
	b := s.Take(at.Add(time.Millisecond), 1) // at +3.001s, between a and the others
	if d := s.Take(at.Add(time.Second), 0); d.Remaining != 6 || d.MoreAfter != time.Millisecond {
		t.Fatalf("at a's expiry: %+v, want 6 left (its 3 back), more in 1ms", d)
	}
	s.Undo(at.Add(time.Second), 1, b)
	if d := s.Take(at.Add(time.Second), 0); d.Remaining != 7 || d.ResetAfter != 58*time.Second {
		t.Fatalf("b given back: %+v, want 7 left, reset in 58s", d)
	}
	if d := s.Take(relimitT0.Add(time.Minute), 0); d.Remaining != 8 {
		t.Fatalf("at the first lease's expiry: %+v, want 8 left", d)
	}
	if d := s.Take(relimitT0.Add(61*time.Second), 0); d.Remaining != 10 || !s.Idle(relimitT0.Add(61*time.Second)) {
		t.Fatalf("at the last lease's expiry: %+v, want 10 left and idle", d)
	}
}
