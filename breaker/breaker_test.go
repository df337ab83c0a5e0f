package breaker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/zonelimit/caddy-ratelimit/internal/storetest"
)

var errDown = errors.New("redis: connection refused")

// t0 is the synthetic origin of the tests' instants.
var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// blockProbe fails until the test is done, so that a tripped breaker stays
// open while the test looks at it.
func blockProbe(ctx context.Context) error { return errDown }

// transitions records OnStateChange calls.
type transitions struct {
	mu  sync.Mutex
	got []string
}

func (tr *transitions) record(from, to State) {
	tr.mu.Lock()
	tr.got = append(tr.got, from.String()+">"+to.String())
	tr.mu.Unlock()
}

func (tr *transitions) list() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.got...)
}

// expectState fails the test at once unless b is in state want; what says
// after what.
func expectState(t *testing.T, b *Breaker, want State, what string) {
	t.Helper()
	if got := b.State(); got != want {
		t.Fatalf("%s: state %v, want %v", what, got, want)
	}
}

// probers returns the number of prober goroutines alive in the process.
func probers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	return strings.Count(string(buf), "breaker.(*Breaker).prober(")
}

// noProbers waits until no prober goroutine is left, so that a test does not
// see the goroutines of an earlier one.
func noProbers(t *testing.T) {
	t.Helper()
	storetest.WaitFor(t, "no prober goroutine", func() bool { return probers() == 0 })
}

func TestStateString(t *testing.T) {
	for s, want := range map[State]string{Closed: "closed", Open: "open", State(7): "State(7)"} {
		if got := s.String(); got != want {
			t.Errorf("State(%d).String() = %q, want %q", int(s), got, want)
		}
	}
}

func TestTripsAfterExactlyNFailures(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 5, 8} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			// The breaker of the subtest before has closed, but its prober's
			// goroutine may take a moment more to leave the runtime.
			noProbers(t)
			want := n
			if want == 0 {
				want = DefaultFailures
			}
			var tr transitions
			b := New(Options{Failures: n, Probe: blockProbe, OnStateChange: tr.record})
			defer b.Close()
			for i := 1; i < want; i++ {
				b.RecordAt(at(time.Duration(i)*time.Second), errDown)
				if b.State() != Closed || !b.Allow() {
					t.Fatalf("after %d of %d failures: state %v, Allow %v; want closed, true", i, want, b.State(), b.Allow())
				}
			}
			if got := probers(); got != 0 {
				t.Fatalf("%d prober goroutines while closed, want 0", got)
			}
			b.RecordAt(at(time.Hour), errDown)
			if b.State() != Open || b.Allow() {
				t.Fatalf("after %d failures: state %v, Allow %v; want open, false", want, b.State(), b.Allow())
			}
			if got := tr.list(); len(got) != 1 || got[0] != "closed>open" {
				t.Fatalf("transitions %v, want [closed>open]", got)
			}
		})
	}
}

func TestSuccessResetsCount(t *testing.T) {
	b := New(Options{Failures: 3, Probe: blockProbe})
	defer b.Close()
	now := t0
	step := func(err error) {
		now = now.Add(time.Millisecond)
		b.RecordAt(now, err)
	}
	for range 10 {
		step(errDown)
		step(errDown)
		step(nil)
		expectState(t, b, Closed, "2 failures then a success")
	}
	step(errDown)
	step(errDown)
	step(errDown)
	expectState(t, b, Open, "3 consecutive failures after a success")
}

// The calls of one failed batch, recording one Shared (wrapped or not),
// count one failure; each new Shared counts again.
func TestSharedCountsOnce(t *testing.T) {
	b := New(Options{Failures: 3, Probe: blockProbe})
	defer b.Close()
	now := t0
	batch := func() {
		sh := &Shared{Err: errDown}
		for i := range 50 {
			now = now.Add(time.Microsecond)
			err := error(sh)
			if i%2 == 1 {
				err = fmt.Errorf("redis store: gcra: %w", sh)
			}
			b.RecordAt(now, err)
		}
	}
	batch()
	batch()
	expectState(t, b, Closed, "two failed batches of 50 calls")
	b.RecordAt(now, errDown) // a failure of its own
	expectState(t, b, Open, "two failed batches and a failed call")
	if err := b.Err(); !errors.Is(err, errDown) {
		t.Errorf("Err %v, want the batch's error", err)
	}
}

func TestWindow(t *testing.T) {
	const w = 10 * time.Second
	tests := []struct {
		name string
		at   []time.Duration // failure instants, seconds after t0
		open bool
	}{
		{"within", []time.Duration{0, 1, 2, 3, 4}, true},
		{"exactly window apart", []time.Duration{0, 1, 2, 3, 10}, true},
		{"spread", []time.Duration{0, 3, 6, 9, 12}, false},
		{"spread then dense", []time.Duration{0, 4, 8, 12, 16, 20, 21, 22}, true},
		// Sliding: the last five (9, 11, 12, 13, 14) lie within 10s, though
		// the streak began at 0.
		{"sliding", []time.Duration{0, 9, 11, 12, 13, 14}, true},
		{"long quiet streak", []time.Duration{0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1001, 1002, 1003, 1004}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := New(Options{Failures: 5, Window: w, Probe: blockProbe})
			defer b.Close()
			for i, s := range tt.at {
				expectState(t, b, Closed, fmt.Sprintf("%d failures, before the last", i))
				b.RecordAt(at(s*time.Second), errDown)
			}
			if got := b.State() == Open; got != tt.open {
				t.Fatalf("open = %v, want %v", got, tt.open)
			}
		})
	}

	// Without a window, far-apart failures trip it.
	b := New(Options{Failures: 5, Probe: blockProbe})
	defer b.Close()
	for i := range 5 {
		b.RecordAt(at(time.Duration(i)*time.Hour), errDown)
	}
	expectState(t, b, Open, "no window: 5 failures an hour apart")
}

func TestNowOption(t *testing.T) {
	clock := storetest.NewClock(t0)
	b := New(Options{Failures: 3, Window: time.Second, Probe: blockProbe, Now: clock.Now})
	defer b.Close()
	for range 6 {
		b.Record(errDown)
		clock.Add(time.Second)
	}
	expectState(t, b, Closed, "failures 1s apart with a 1s window of 3")
	b.Record(errDown)
	clock.Add(time.Millisecond)
	b.Record(errDown)
	clock.Add(time.Millisecond)
	b.Record(errDown)
	expectState(t, b, Open, "last 3 failures within 1s")
}

func TestAllowFalseWhileOpen(t *testing.T) {
	var tr transitions
	b := New(Options{Failures: 2, Probe: blockProbe, OnStateChange: tr.record})
	defer b.Close()
	b.RecordAt(t0, errDown)
	b.RecordAt(t0, errDown)
	for i := range 100 {
		if b.Allow() {
			t.Fatal("Allow true while open")
		}
		// Outcomes of calls that were under way when it tripped change
		// nothing, successes included: the prober alone closes it.
		if i%2 == 0 {
			b.RecordAt(t0, errDown)
		} else {
			b.RecordAt(t0, nil)
		}
	}
	expectState(t, b, Open, "outcomes recorded while open")
	if got := tr.list(); len(got) != 1 {
		t.Fatalf("transitions %v, want one", got)
	}
}

func TestCanceledNotCounted(t *testing.T) {
	canceled := []error{
		context.Canceled,
		fmt.Errorf("redis store: gcra: %w", context.Canceled),
		&net.OpError{Op: "read", Net: "tcp", Err: context.Canceled},
	}
	counted := []error{
		context.DeadlineExceeded,
		fmt.Errorf("redis store: gcra: %w", context.DeadlineExceeded),
		&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)},
		&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded},
		errDown,
	}
	for _, err := range canceled {
		b := New(Options{Failures: 1, Probe: blockProbe})
		for range 100 {
			b.RecordAt(t0, err)
			b.Record(err)
		}
		if b.State() != Closed {
			t.Errorf("%v: tripped the breaker; a canceled call must not count", err)
		}
		b.Close()
	}
	for _, err := range counted {
		b := New(Options{Failures: 1, Probe: blockProbe})
		b.Record(err)
		if b.State() != Open {
			t.Errorf("%v: did not trip the breaker", err)
		}
		b.Close()
	}

	// A canceled call between failures neither counts nor resets.
	b := New(Options{Failures: 2, Probe: blockProbe})
	defer b.Close()
	b.RecordAt(t0, errDown)
	b.RecordAt(t0, context.Canceled)
	expectState(t, b, Closed, "one failure and one canceled call")
	b.RecordAt(t0, errDown)
	expectState(t, b, Open, "a failure, a canceled call, a failure (a canceled call must not reset the count)")
}

func TestProberClosesAfterProbeSucceeds(t *testing.T) {
	noProbers(t)
	for _, k := range []int{0, 1, 5} {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			var calls atomic.Int32
			probe := func(ctx context.Context) error {
				if int(calls.Add(1)) <= k {
					return errDown
				}
				return nil
			}
			var tr transitions
			b := New(Options{Failures: 3, ProbeInterval: time.Millisecond, Probe: probe, OnStateChange: tr.record})
			defer b.Close()
			for range 3 {
				b.RecordAt(t0, errDown)
			}
			expectState(t, b, Open, "3 failures")
			// The state reads Closed a moment before the close is reported.
			storetest.WaitFor(t, "the close reported", func() bool { return len(tr.list()) >= 2 })
			expectState(t, b, Closed, "the close reported")
			if !b.Allow() {
				t.Fatal("Allow false once closed")
			}
			storetest.WaitFor(t, "the prober to exit", func() bool { return probers() == 0 })
			if got := int(calls.Load()); got != k+1 {
				t.Fatalf("Probe called %d times, want %d (%d failures, then a success)", got, k+1, k)
			}
			if got := tr.list(); strings.Join(got, " ") != "closed>open open>closed" {
				t.Fatalf("transitions %v, want [closed>open open>closed]", got)
			}
			// It starts from a zero count and can trip again.
			b.RecordAt(t0, errDown)
			b.RecordAt(t0, errDown)
			expectState(t, b, Closed, "2 failures once closed (the failures from before it tripped forgotten)")
			b.RecordAt(t0, errDown)
			expectState(t, b, Open, "3 failures once closed")
		})
	}
}

func TestNilProbeCoolDown(t *testing.T) {
	b := New(Options{Failures: 1, ProbeInterval: time.Millisecond})
	defer b.Close()
	b.Record(errDown)
	expectState(t, b, Open, "1 failure")
	storetest.WaitFor(t, "the breaker to close", func() bool { return b.State() == Closed })
}

func TestNoGoroutineWhileClosed(t *testing.T) {
	noProbers(t)
	base := runtime.NumGoroutine()
	b := New(Options{Failures: 3, Probe: blockProbe})
	defer b.Close()
	for range 1000 {
		b.Allow()
		b.Record(nil)
		b.Record(errDown)
		b.Record(errDown)
	}
	if got := probers(); got != 0 {
		t.Fatalf("%d prober goroutines while closed, want 0", got)
	}
	if got := runtime.NumGoroutine(); got > base {
		t.Fatalf("%d goroutines, %d before New", got, base)
	}
}

func TestCloseStopsProber(t *testing.T) {
	noProbers(t)
	var calls atomic.Int32
	var closed atomic.Bool
	var late atomic.Int32
	probe := func(ctx context.Context) error {
		if closed.Load() {
			late.Add(1)
		}
		calls.Add(1)
		return errDown
	}
	var tr transitions
	b := New(Options{Failures: 1, ProbeInterval: time.Millisecond, Probe: probe, OnStateChange: tr.record})
	b.Record(errDown)
	storetest.WaitFor(t, "a few probes", func() bool { return calls.Load() >= 3 })
	if got := probers(); got != 1 {
		t.Fatalf("%d prober goroutines while open, want 1", got)
	}
	b.Close()
	closed.Store(true)
	// The prober has finished when Close returns; its goroutine may take a
	// moment more to leave the runtime.
	noProbers(t)
	n := calls.Load()
	time.Sleep(20 * time.Millisecond) // room for a leaked prober to show
	if calls.Load() != n || late.Load() != 0 {
		t.Fatalf("Probe called after Close returned")
	}

	// After Close the state is frozen: open stays open, nothing is recorded,
	// OnStateChange is not called again.
	b.Record(nil)
	b.Record(errDown)
	if b.State() != Open || b.Allow() {
		t.Fatalf("after Close: state %v, Allow %v; want open, false", b.State(), b.Allow())
	}
	if got := tr.list(); len(got) != 1 {
		t.Fatalf("transitions %v, want [closed>open]", got)
	}
	b.Close() // idempotent
}

func TestCloseCancelsProbeUnderWay(t *testing.T) {
	noProbers(t)
	started := make(chan struct{})
	var returned atomic.Bool
	probe := func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		returned.Store(true)
		return ctx.Err()
	}
	var tr transitions
	b := New(Options{Failures: 1, ProbeInterval: time.Millisecond, Probe: probe, OnStateChange: tr.record})
	b.Record(errDown)
	<-started
	b.Close()
	if !returned.Load() {
		t.Fatal("Close returned before the probe under way did")
	}
	noProbers(t)
	if got := tr.list(); len(got) != 1 {
		t.Fatalf("transitions %v, want [closed>open]", got)
	}
}

func TestCloseClosedBreaker(t *testing.T) {
	// The breakers of earlier tests are closed, but their probers' goroutines
	// may take a moment more to leave the runtime.
	noProbers(t)
	var tr transitions
	b := New(Options{Failures: 1, Probe: blockProbe, OnStateChange: tr.record})
	b.Close()
	b.Record(errDown)
	if b.State() != Closed || !b.Allow() {
		t.Fatalf("after Close a failure changed the state to %v", b.State())
	}
	if got := tr.list(); len(got) != 0 {
		t.Fatalf("transitions %v after Close, want none", got)
	}
	if got := probers(); got != 0 {
		t.Fatalf("%d prober goroutines, want 0", got)
	}
}

func TestNilBreaker(t *testing.T) {
	var b *Breaker
	if !b.Allow() || b.State() != Closed {
		t.Fatal("nil breaker: want closed, Allow true")
	}
	for range 10 {
		b.Record(errDown)
		b.RecordAt(t0, errDown)
	}
	if !b.Allow() {
		t.Fatal("nil breaker tripped")
	}
	b.Close()
}

// TestOnStateChangeOncePerTransition has 64 goroutines record failures at
// once, again and again, and checks each trip and each close is reported
// exactly once.
func TestOnStateChangeOncePerTransition(t *testing.T) {
	noProbers(t)
	release := make(chan struct{}, 1)
	probe := func(ctx context.Context) error {
		select {
		case <-release:
			return nil
		default:
			return errDown
		}
	}
	var tr transitions
	b := New(Options{Failures: 5, ProbeInterval: time.Millisecond, Probe: probe, OnStateChange: tr.record})
	defer b.Close()
	const cycles, workers, each = 20, 64, 50
	for c := range cycles {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range workers {
			wg.Go(func() {
				<-start
				for range each {
					b.Allow()
					b.Record(errDown)
				}
			})
		}
		close(start)
		wg.Wait()
		expectState(t, b, Open, fmt.Sprintf("cycle %d: %d failures", c, workers*each))
		if got := len(tr.list()); got != 2*c+1 {
			t.Fatalf("cycle %d: %d transitions after the trip, want %d: %v", c, got, 2*c+1, tr.list())
		}
		release <- struct{}{}
		// The state reads Closed a moment before the prober reports it
		// (State takes no lock): wait for the report.
		storetest.WaitFor(t, "the close reported", func() bool { return len(tr.list()) >= 2*c+2 })
		expectState(t, b, Closed, fmt.Sprintf("cycle %d: closed", c))
		if got := len(tr.list()); got != 2*c+2 {
			t.Fatalf("cycle %d: %d transitions after closing, want %d: %v", c, got, 2*c+2, tr.list())
		}
	}
	for i, s := range tr.list() {
		want := "closed>open"
		if i%2 == 1 {
			want = "open>closed"
		}
		if s != want {
			t.Fatalf("transition %d is %s, want %s", i, s, want)
		}
	}
}

// TestConcurrentAllowRecord mixes Allow, Record and State from many
// goroutines while the prober closes the breaker now and then, and checks
// the transitions reported alternate and end in the current state.
func TestConcurrentAllowRecord(t *testing.T) {
	noProbers(t)
	var probes atomic.Int32
	probe := func(ctx context.Context) error {
		if probes.Add(1)%3 == 0 {
			return nil
		}
		return errDown
	}
	var tr transitions
	b := New(Options{Failures: 3, Window: time.Second, ProbeInterval: 50 * time.Microsecond, Probe: probe, OnStateChange: tr.record})
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Go(func() {
			for i := range 2000 {
				if !b.Allow() {
					_ = b.State()
					continue
				}
				switch (w + i) % 4 {
				case 0:
					b.Record(nil)
				case 1:
					b.Record(context.Canceled)
				default:
					b.Record(errDown)
				}
			}
		})
	}
	wg.Wait()
	b.Close()
	final := b.State()
	got := tr.list()
	if len(got) == 0 {
		t.Fatal("no transition at all")
	}
	for i, s := range got {
		want := "closed>open"
		if i%2 == 1 {
			want = "open>closed"
		}
		if s != want {
			t.Fatalf("transition %d is %s, want %s (all: %v)", i, s, want, got)
		}
	}
	if last := got[len(got)-1]; !strings.HasSuffix(last, ">"+final.String()) {
		t.Fatalf("last transition %s, but the state is %v", last, final)
	}
	noProbers(t)
}

// hourly returns a clock that moves on an hour at every reading: failures
// that far apart never trip a breaker with a shorter window.
func hourly() func() time.Time {
	now := t0
	return func() time.Time {
		now = now.Add(time.Hour)
		return now
	}
}

func TestZeroAllocs(t *testing.T) {
	clock := hourly()
	b := New(Options{Failures: 3, Window: time.Minute, Probe: blockProbe, Now: clock})
	defer b.Close()
	open := New(Options{Failures: 1, Probe: blockProbe})
	defer open.Close()
	open.Record(errDown)
	for name, f := range map[string]func(){
		"Allow":          func() { b.Allow() },
		"Record(nil)":    func() { b.Record(nil) },
		"Record(err)":    func() { b.Record(errDown) },
		"RecordAt(err)":  func() { b.RecordAt(clock(), errDown) },
		"reset":          func() { b.Record(errDown); b.Record(nil) },
		"State":          func() { _ = b.State() },
		"Allow(open)":    func() { open.Allow() },
		"Record(open)":   func() { open.Record(errDown) },
		"Record(cancel)": func() { b.Record(context.Canceled) },
	} {
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s: %v allocs per call, want 0", name, n)
		}
	}
}

// closedBreaker is the breaker of a benchmark of the closed state's paths.
func closedBreaker(b *testing.B) *Breaker {
	br := New(Options{Probe: blockProbe})
	b.Cleanup(br.Close)
	b.ReportAllocs()
	return br
}

func BenchmarkAllowClosed(b *testing.B) {
	br := closedBreaker(b)
	for b.Loop() {
		if !br.Allow() {
			b.Fatal("open")
		}
	}
}

func BenchmarkAllowClosedParallel(b *testing.B) {
	br := closedBreaker(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if !br.Allow() {
				b.Error("open")
				return
			}
		}
	})
}

func BenchmarkRecordSuccess(b *testing.B) {
	br := closedBreaker(b)
	for b.Loop() {
		br.Record(nil)
	}
}

func BenchmarkRecordSuccessParallel(b *testing.B) {
	br := closedBreaker(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			br.Record(nil)
		}
	})
}

// BenchmarkRecordFailure is the slow path: a failure that does not trip.
func BenchmarkRecordFailure(b *testing.B) {
	br := New(Options{Failures: 5, Window: time.Minute, Probe: blockProbe, Now: hourly()})
	defer br.Close()
	b.ReportAllocs()
	for b.Loop() {
		br.Record(errDown)
	}
}
