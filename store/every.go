package store

import "time"

// Every calls f every interval until stop is closed, then closes done: the
// loop of the goroutines that sweep, sync or reap a store's keys.
func Every(interval time.Duration, stop <-chan struct{}, done chan<- struct{}, f func()) {
	defer close(done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			f()
		}
	}
}
