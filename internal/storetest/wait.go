package storetest

import (
	"testing"
	"time"
)

// WaitFor polls cond until it holds, failing the test when it still does
// not after 10s. The deadline is only there to end a test that hangs: it is
// long enough for a loaded machine, as the tests assert that something
// happens, never how soon.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	const limit = 10 * time.Second
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", limit, what)
		}
		time.Sleep(time.Millisecond)
	}
}
