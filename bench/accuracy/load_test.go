package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestOpenLoopDoesNotWaitForResponses holds every response until all the
// run's requests have arrived: a load generator that waited for answers
// before sending more would never get there.
func TestOpenLoopDoesNotWaitForResponses(t *testing.T) {
	const rate, d = 100.0, 100 * time.Millisecond // 10 requests
	var arrived atomic.Int32
	all := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Case") != "k" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if arrived.Add(1) == 10 {
			once.Do(func() { close(all) })
		}
		select {
		case <-all:
			w.Header().Set("X-Accuracy-Time", strconv.FormatInt(time.Now().UnixMilli(), 10))
			w.WriteHeader(http.StatusOK)
		case <-time.After(10 * time.Second): // only if the loop is closed
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()

	_, rs, _ := openLoop(context.Background(), srv.Client(), []string{srv.URL, srv.URL}, "k", rate, d, 10*time.Millisecond)
	if len(rs) != 10 {
		t.Fatalf("%d requests, want 10", len(rs))
	}
	for i, r := range rs {
		if r.status != http.StatusOK {
			t.Errorf("request %d: status %d, want 200 (all 10 in flight at once)", i, r.status)
		}
	}
}

func TestBinned(t *testing.T) {
	start := time.UnixMilli(1_000_000_000_000) // on a 100 ms boundary
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	rs := []response{
		{at(0), http.StatusOK},
		{at(99), http.StatusTooManyRequests},
		{at(100), http.StatusOK},
		{at(250), 0},                   // no answer: offered, not admitted
		{at(300), http.StatusOK},       // after the run: left out
		{at(-5), http.StatusOK},        // before it: left out
		{at(150), http.StatusNotFound}, // an error is not an admission
	}
	first, offered, admitted := binned(start, 300*time.Millisecond, bin, rs)
	if first != 10_000_000_000 {
		t.Errorf("first bin %d, want 10000000000", first)
	}
	if want := []int{2, 2, 1}; !slices.Equal(offered, want) {
		t.Errorf("offered %v, want %v", offered, want)
	}
	if want := []int{1, 1, 0}; !slices.Equal(admitted, want) {
		t.Errorf("admitted %v, want %v", admitted, want)
	}
}
