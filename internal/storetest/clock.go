package storetest

import (
	"sync"
	"time"
)

// Clock is a synthetic clock: the test moves it (Set, Add), the code under
// test reads it (Now, as an Options.Now). The stores (instances) and
// breakers of one test share one. Safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock that reads at.
func NewClock(at time.Time) *Clock { return &Clock{t: at} }

// Now is the instant the clock was last moved to.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t (backwards too).
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// Add moves the clock on by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
