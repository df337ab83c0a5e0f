package redisstore

import (
	"context"
	"errors"
	"sync"

	"github.com/redis/go-redis/v9"
)

// directPipe is what a direct Pipeliner shares between its callers, who
// take turns at leading: the leader writes a batch on the connection and
// reads its replies; the callers that come meanwhile queue their calls,
// which go out as the next batch, and sleep until it is answered. No
// worker goroutine: a caller that finds the connection idle sends its
// call itself, and a batch's replies are read by one of its callers, so
// that a call costs no hand-off to a worker and back (two wake-ups).
type directPipe struct {
	d *directConn // used by the leader only

	mu      sync.Mutex
	busy    bool          // a caller leads
	closing bool          // set by Close: no call is queued from then on
	queue   []*scriptCall // the calls for the next batch

	// spare is a slice for a batch or the queue to reuse: a slice is
	// the queue's, then a batch's (the leader's), then spare.
	spare []*scriptCall

	// The leader's, handed from leader to leader (see lead).
	batch   []*scriptCall // the batch the leader reads the replies of
	written bool          // batch is written on d already, with error sent
	sent    error

	stopped chan struct{} // closed once a leader closes d after Close
}

// runDirect runs c through p's connection and answers into r: at once,
// by the caller itself, when no batch is in flight; else in the next
// batch, whose replies the first of its callers that waits without a
// deadline reads. A caller whose ctx has a deadline never leads (it could
// not stop waiting in a read): when it finds the connection idle, a
// goroutine leads its batch.
func (p *Pipeliner) runDirect(ctx context.Context, c *scriptCall, r *reply) {
	_, c.watch = ctx.Deadline()
	x := p.direct
	x.mu.Lock()
	if x.closing {
		x.mu.Unlock()
		c.release()
		*r = reply{err: redis.ErrClosed}
		return
	}
	if !x.busy {
		x.busy = true
		x.batch, x.spare = append(x.spare[:0], c), nil
		x.mu.Unlock()
		x.written = false
		if !c.watch {
			p.lead(c)
			c.releaseTo(r)
			return
		}
		go p.lead(nil)
	} else {
		x.queue = append(x.queue, c)
		x.mu.Unlock()
	}
	if !c.watch {
		// No deadline: its batch ends within the client's timeouts
		// whatever happens, and watching ctx (a channel made for each
		// request) costs more than the rest of the call.
		<-c.done
		if c.lead {
			p.lead(c)
		}
		c.releaseTo(r)
		return
	}
	select {
	case <-c.done:
		c.releaseTo(r)
	case <-ctx.Done():
		if c.state.CompareAndSwap(callWaiting, callLeft) {
			// Whoever answers c drops it; it may still be sent, and
			// applied in Redis.
			*r = reply{err: ctx.Err()}
			return
		}
		<-c.done // answered meanwhile
		c.releaseTo(r)
	}
}

// lead sends x.batch (unless written already), reads its replies and
// answers its calls but mine (the leader's own, if any: its caller reads
// its reply on return). The calls queued meanwhile are written at once,
// as the next batch, before the batch's callers are woken (Redis works on
// them meanwhile), and the first of them whose caller waits without a
// deadline is handed the lead: it reads their replies. The calls queued
// behind a batch that failed, all of them, fail with its error, unsent:
// they leave the queue before the batch's callers are woken (a call they
// make next did not queue behind it).
func (p *Pipeliner) lead(mine *scriptCall) {
	x := p.direct
	batch := x.batch
	answered := false
	defer func() {
		if !answered {
			p.dropLead(batch, mine)
		}
	}()
	var failed error
	switch {
	case x.written:
		failed = x.d.receive(p.c, batch, x.sent)
	case p.hooked.Load():
		_, _, failed = viaGoRedis(p.c, batch, nil, nil)
	default:
		failed = x.d.receive(p.c, batch, x.d.send(batch, true))
	}
	answered = true

	x.mu.Lock()
	next := x.queue
	keep := len(next) > 0 && failed == nil && !x.closing
	if len(next) > 0 {
		x.queue, x.spare = x.spare[:0], nil
		// Without a next leader (keep false), every call queued fails
		// now: one left queued would wait for a call that may never
		// come.
		if keep && len(next) > maxPipeline {
			x.queue = append(x.queue, next[maxPipeline:]...)
			next = next[:maxPipeline]
		}
	}
	x.written = false
	if x.closing {
		x.d.close()
		close(x.stopped)
		failed = redis.ErrClosed
	}
	x.busy = keep
	if keep {
		// Set under the lock: a leader that gave the lead up sets
		// spare under it too, after it answered its batch. No one takes
		// spare while this lead lasts, so batch is answered first.
		x.spare = batch[:0]
	}
	x.mu.Unlock()
	// Without the lead (keep false), only what is local is used from
	// here: another caller may lead already.

	if keep && !p.hooked.Load() {
		x.sent, x.written = x.d.send(next, false), true
	}
	answer(batch, mine)
	clear(batch)
	if !keep {
		for _, c := range next {
			c.reply.err = unsentError{failed}
		}
		answer(next, nil)
		clear(next)
		x.mu.Lock()
		if x.spare == nil {
			x.spare = batch[:0]
		}
		x.mu.Unlock()
		return
	}
	x.batch = next
	for _, c := range next {
		if !c.watch {
			c.lead = true
			c.signal() // it waits: no deadline
			return
		}
	}
	// Every caller of next watches a deadline.
	go p.lead(nil)
}

// unsentError is the error of a call that failed unsent, queued behind a
// batch that failed (err, its error): Redis never saw it, so nothing of
// it can run later (see mayRunLater).
type unsentError struct{ err error }

func (e unsentError) Error() string { return e.err.Error() }

func (e unsentError) Unwrap() error { return e.err }

// errLeaderPanicked fails the calls of a batch whose leader panicked
// while it sent the batch or read its replies (a go-redis hook, say).
var errLeaderPanicked = errors.New("redis: the call that sent this batch panicked")

// dropLead gives the lead up when lead panics before the batch is
// answered (the panic goes on to the caller's recovery, net/http's for a
// request): the batch's calls and those queued fail, and the connection,
// whose replies may be half read, is closed. Else no call would lead
// again, and every call would wait forever.
func (p *Pipeliner) dropLead(batch []*scriptCall, mine *scriptCall) {
	x := p.direct
	x.d.close()
	x.written = false
	for _, c := range batch {
		c.reply.err = errLeaderPanicked
	}
	answer(batch, mine)
	x.mu.Lock()
	queued := x.queue
	x.queue = nil
	x.busy = false
	if x.closing {
		close(x.stopped)
	}
	x.mu.Unlock()
	for _, c := range queued {
		c.reply.err = unsentError{errLeaderPanicked}
	}
	answer(queued, nil)
}

// answer wakes the callers of the calls but mine; a call whose caller
// stopped waiting goes back to the pool.
func answer(calls []*scriptCall, mine *scriptCall) {
	for _, c := range calls {
		if c != mine && !c.signal() {
			c.release()
		}
	}
}

// closeDirect is Close for a direct Pipeliner: the calls queued fail, and
// the connection is closed once the batch in flight, if any, is answered.
func (p *Pipeliner) closeDirect() {
	x := p.direct
	x.mu.Lock()
	x.closing = true
	queued := x.queue
	x.queue = nil
	busy := x.busy
	x.mu.Unlock()
	for _, c := range queued {
		c.reply.err = redis.ErrClosed
	}
	answer(queued, nil)
	if busy {
		<-x.stopped
	} else {
		x.d.close()
	}
}
