package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/breaker"
)

// Pipeliner sends the script calls of concurrent requests to Redis in
// pipelines: what queued while the pipeline ahead was in flight goes out
// in one write and comes back in one read. Each decision is still one
// EVALSHA, answered as soon as its pipeline is; what it saves is the
// system calls and wake-ups of a round trip per request, which on a busy
// instance cost as much as serving the request itself. Under light load a
// call goes out alone, at once.
//
// Workers send the calls as go-redis pipelines, which on a Cluster route
// each call to its slot's master; on a single node or a Sentinel's
// master, a NewDirectPipeliner has no worker: its callers write the calls
// on a connection of its own and read the replies themselves (see
// directConn and runDirect).
//
// A Pipeliner belongs to one client; the Stores built with it (Options) and
// the client share it. It is safe for concurrent use.
type Pipeliner struct {
	c     redis.UniversalClient
	wait  time.Duration // how long a caller waits for its reply at most
	calls chan *scriptCall
	stop  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once

	// hooked makes a direct Pipeliner send through go-redis, whose hooks
	// see every command (see Client.AddHook).
	hooked atomic.Bool

	closed  atomic.Bool  // set by Close
	senders atomic.Int64 // callers in enqueue

	direct *directPipe // a NewDirectPipeliner's; nil: workers
}

// Pipeliner sizing: pipelineWorkers go-redis pipelines in flight at once
// (so a slow reply does not hold up every request), at most maxPipeline
// calls each.
const (
	pipelineWorkers = 4
	maxPipeline     = 128
	callQueue       = 1024
)

// evalCall is one script call: its script, KEYS and ARGV, or a Store's
// call (take), whose KEYS and ARGV are built only for go-redis (keysArgs).
type evalCall struct {
	script *redis.Script
	keys   []string
	args   []any
	take   storeCall
}

// replyLen is the most integers a script's reply holds.
const replyLen = 16

// reply is a script's answer as a store reads it: the integers of its
// array (or its one integer), or the error it failed with (redis.Nil for
// a nil reply).
type reply struct {
	vals [replyLen]int64
	n    int
	err  error
}

// ints returns the integers of r.
func (r *reply) ints() []int64 { return r.vals[:r.n] }

// replyOf reads a script's reply from go-redis's cmd.
func replyOf(cmd *redis.Cmd) reply {
	var r reply
	switch v := cmd.Val().(type) {
	case nil:
		r.err = cmd.Err()
		if r.err == nil {
			r.err = redis.Nil
		}
	case int64:
		r.vals[0], r.n = v, 1
	case string: // a status (OK): no value, as directConn reads it
	default:
		vs, err := cmd.Int64Slice()
		if err != nil {
			r.err = err
		} else if len(vs) > replyLen {
			r.err = fmt.Errorf("redis: script answered %d values, more than the %d expected", len(vs), replyLen)
		}
		r.n = copy(r.vals[:], vs)
	}
	if r.err == nil {
		r.err = cmd.Err()
	}
	return r
}

// scriptCall is one script call waiting for a pipeline.
type scriptCall struct {
	evalCall
	reply reply // with err set when never sent
	done  chan struct{}

	// state is callWaiting until the call is answered or handed the
	// lead (callSignaled; see signal), or its caller stops waiting
	// (callLeft: the call then goes back to the pool from whoever
	// answers it). lead says that the caller of a direct Pipeliner reads
	// the replies of the batch its call is in (see runDirect).
	state atomic.Int32
	lead  bool
	watch bool // its caller's ctx has a deadline (see runDirect)

	// deadline is when the caller stops waiting (Pipeliner.wait after it
	// queued the call), timed by timer (kept with the pooled call): a call
	// still queued then is not sent at all.
	deadline time.Time
	timer    *time.Timer
}

var callPool = sync.Pool{New: func() any { return &scriptCall{done: make(chan struct{}, 1)} }}

// States of a scriptCall.
const (
	callWaiting = iota
	callSignaled
	callLeft
)

// signal wakes c's caller, unless it stopped waiting (false).
func (c *scriptCall) signal() bool {
	if !c.state.CompareAndSwap(callWaiting, callSignaled) {
		return false
	}
	c.done <- struct{}{}
	return true
}

// release puts c back in the pool and returns its reply.
func (c *scriptCall) release() reply {
	var r reply
	c.releaseTo(&r)
	return r
}

// releaseTo puts c back in the pool and copies its reply into r: one copy
// of it, where returning it copies it at every return on the way.
func (c *scriptCall) releaseTo(r *reply) {
	*r = c.reply
	// A reply's integers past n are not read: n and err make it empty.
	c.evalCall, c.reply.n, c.reply.err, c.deadline, c.lead, c.watch = evalCall{}, 0, nil, time.Time{}, false, false
	c.state.Store(callWaiting)
	callPool.Put(c)
}

// NewPipeliner starts the workers of a Pipeliner on c. A caller waits at
// most wait for its reply, however long its call queued behind the
// pipelines of others (a hung Redis holds every worker for a timeout): wait
// is one round trip's timeouts (the client's write and read timeouts), so a
// failing Redis costs a call one timeout, not one per pipeline ahead of
// it. Zero: no bound but the client's timeouts. Close stops the workers.
//
// The Pipeliner uses go-redis's pipelines. NewDirectPipeliner writes on
// connections of its own where it can.
func NewPipeliner(c redis.UniversalClient, wait time.Duration) *Pipeliner {
	p := newPipeliner(c, wait, pipelineWorkers)
	for i := 0; i < pipelineWorkers; i++ {
		go p.work()
	}
	return p
}

// NewDirectPipeliner is NewPipeliner writing the calls on a connection of
// its own, dialed with c's options (see directConn), when c is a single
// node or a Sentinel's master with a plain username and password; with
// go-redis's pipelines otherwise (a Cluster), and once a hook is added
// through Client.AddHook. One connection and a batch in flight at a time,
// sent and read by its callers (see runDirect): the calls that queue
// meanwhile go out together, which costs a request the least CPU. A call
// waits at most for the batch ahead of it and its own: when that batch
// fails (a timeout, a connection refused), the calls queued behind it
// fail with its error at once, without a timer per call, and wait is not
// used. A caller's context is watched while it waits only when it has a
// deadline (see run).
func NewDirectPipeliner(c redis.UniversalClient, wait time.Duration) *Pipeliner {
	o := directOptions(c)
	if o == nil {
		return NewPipeliner(c, wait)
	}
	p := newPipeliner(c, 0, 0)
	p.direct = &directPipe{d: &directConn{opts: o}, stopped: make(chan struct{})}
	return p
}

func newPipeliner(c redis.UniversalClient, wait time.Duration, workers int) *Pipeliner {
	p := &Pipeliner{c: c, wait: wait, calls: make(chan *scriptCall, callQueue), stop: make(chan struct{})}
	p.wg.Add(workers)
	return p
}

// Close stops the workers and waits for them (a direct Pipeliner: for the
// batch in flight, then closes its connection); calls still queued fail.
// It may be called more than once.
func (p *Pipeliner) Close() {
	if p.direct != nil {
		p.once.Do(p.closeDirect)
		return
	}
	p.once.Do(func() {
		// No call is queued from now on; those being queued get room
		// from the workers, still running.
		p.closed.Store(true)
		for p.senders.Load() > 0 {
			runtime.Gosched()
		}
		close(p.stop)
		p.wg.Wait()
		p.fail(redis.ErrClosed)
	})
}

// run calls script with keys and args in the next pipeline and returns its
// reply. A ctx done before the call is queued fails it unsent. A direct
// Pipeliner then waits for the reply alone, unless ctx has a deadline
// (see runDirect). Otherwise a ctx done before the reply returns ctx's
// error (the call may still be applied in Redis).
func (p *Pipeliner) run(ctx context.Context, script *redis.Script, keys []string, args []any) reply {
	return p.runCall(ctx, evalCall{script: script, keys: keys, args: args})
}

// runCall is run for the call e.
func (p *Pipeliner) runCall(ctx context.Context, e evalCall) reply {
	var r reply
	p.runTo(ctx, &e, &r)
	return r
}

// runTo is runCall answering into r.
func (p *Pipeliner) runTo(ctx context.Context, e *evalCall, r *reply) {
	if err := ctx.Err(); err != nil {
		*r = reply{err: unsentError{err}}
		return
	}
	c := callPool.Get().(*scriptCall)
	c.evalCall = *e
	if p.direct != nil {
		p.runDirect(ctx, c, r)
		return
	}
	*r = p.runQueued(ctx, c)
}

// runQueued runs c through the workers.
func (p *Pipeliner) runQueued(ctx context.Context, c *scriptCall) reply {
	var expired <-chan time.Time
	if p.wait > 0 {
		c.deadline = time.Now().Add(p.wait)
		if c.timer == nil {
			c.timer = time.NewTimer(p.wait)
		} else {
			c.timer.Reset(p.wait)
		}
		expired = c.timer.C
	}
	if err := p.enqueue(ctx, c, expired); err != nil {
		return reply{err: err}
	}
	if _, ok := ctx.Deadline(); p.wait == 0 && !ok {
		<-c.done // Close answers the calls it finds queued (see enqueue)
	} else {
		select {
		case <-c.done:
		case <-ctx.Done():
			// The worker still owns c: it is not put back.
			return reply{err: ctx.Err()}
		case <-expired:
			// Likewise; the worker does not send it if it has not yet.
			return reply{err: errQueueTimeout}
		case <-p.stop:
			return reply{err: redis.ErrClosed}
		}
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	return c.release()
}

// enqueue queues c for the workers. Close waits for the callers in
// enqueue to leave it, so that it finds every call queued before it.
func (p *Pipeliner) enqueue(ctx context.Context, c *scriptCall, expired <-chan time.Time) error {
	p.senders.Add(1)
	defer p.senders.Add(-1)
	if p.closed.Load() {
		return redis.ErrClosed
	}
	select {
	case p.calls <- c: // the queue has room: most calls
		return nil
	default:
	}
	select {
	case p.calls <- c:
		return nil
	case <-ctx.Done():
		return unsentError{ctx.Err()}
	case <-expired:
		return unsentError{errQueueTimeout} // never queued
	}
}

// errQueueTimeout fails a call whose reply did not come within the
// Pipeliner's wait (a Redis that hangs, holding every worker).
var errQueueTimeout = errors.New("redis: no reply within the read and write timeouts (calls queued behind pipelines that did not return)")

// next waits for a call, then takes those queued behind it, up to
// maxPipeline, into batch; it returns nil once the Pipeliner stops. A call
// whose caller stopped waiting while it queued is answered at once and not
// taken: a hung Redis would only hold the worker for another timeout.
func (p *Pipeliner) next(batch []*scriptCall) []*scriptCall {
	select {
	case c := <-p.calls:
		batch = append(batch, c)
	case <-p.stop:
		return nil
	}
	// The requests that are about to call run get the core first, so
	// that a batch forms instead of a pipeline per call.
	runtime.Gosched()
fill:
	for len(batch) < maxPipeline {
		select {
		case c := <-p.calls:
			batch = append(batch, c)
		default:
			break fill
		}
	}
	now := time.Now()
	sent := batch[:0]
	for _, c := range batch {
		if !c.deadline.IsZero() && !now.Before(c.deadline) {
			c.reply.err = errQueueTimeout
			c.done <- struct{}{}
			continue
		}
		sent = append(sent, c)
	}
	clear(batch[len(sent):])
	return sent
}

// work is a worker: it sends its batches as go-redis pipelines.
func (p *Pipeliner) work() {
	defer p.wg.Done()
	batch := make([]*scriptCall, 0, maxPipeline)
	evals := make([]*evalCall, 0, maxPipeline)
	cmds := make([]*redis.Cmd, 0, maxPipeline)
	for {
		batch = p.next(batch[:0])
		if batch == nil {
			return
		}
		if len(batch) == 0 {
			continue
		}
		var moving []*scriptCall
		evals, cmds, moving = p.sendBatch(batch, evals, cmds)
		for _, c := range batch {
			if !slices.Contains(moving, c) {
				c.done <- struct{}{}
			}
		}
	}
}

// sendBatch is a worker's viaGoRedis of batch, except that the calls a
// slot being moved refused (TRYAGAIN) are not waited for: they are sent
// again in the background, and answered then; sendBatch returns them
// (moving). The other calls of the batch, to other slots, are answered
// at once instead of waiting for the move.
func (p *Pipeliner) sendBatch(batch []*scriptCall, evals []*evalCall, cmds []*redis.Cmd) ([]*evalCall, []*redis.Cmd, []*scriptCall) {
	for _, c := range batch {
		evals = append(evals, &c.evalCall)
	}
	cmds = evalFirst(context.Background(), p.c, evals, cmds[:0])
	var moving []*scriptCall
	if !refused(cmds, "TRYAGAIN") {
		answerAll(p.c, batch, cmds)
	} else {
		var movingCmds, answeredCmds []*redis.Cmd
		var answered []*scriptCall
		for i, c := range batch {
			if refusedWith(cmds[i], "TRYAGAIN") {
				moving = append(moving, c)
				movingCmds = append(movingCmds, cmds[i])
				continue
			}
			answered = append(answered, c)
			answeredCmds = append(answeredCmds, cmds[i])
		}
		answerAll(p.c, answered, answeredCmds)
		go func() {
			ev := make([]*evalCall, len(moving))
			for i, c := range moving {
				ev[i] = &c.evalCall
			}
			tryAgain(context.Background(), p.c, ev, movingCmds)
			answerAll(p.c, moving, movingCmds)
			for _, c := range moving {
				c.done <- struct{}{}
			}
		}()
	}
	clear(cmds)
	clear(evals)
	return evals[:0], cmds[:0], moving
}

// viaGoRedis sends batch as a go-redis pipeline and reads the replies
// into its calls, with evals and cmds as scratch space (returned for
// reuse). The error is the first network error of a reply.
func viaGoRedis(rc redis.UniversalClient, batch []*scriptCall, evals []*evalCall, cmds []*redis.Cmd) ([]*evalCall, []*redis.Cmd, error) {
	for _, c := range batch {
		evals = append(evals, &c.evalCall)
	}
	// The client's timeouts bound the pipeline; a caller whose ctx ends
	// or whose wait passes stops waiting for it (see run).
	cmds = evalAll(context.Background(), rc, evals, cmds[:0])
	failed := answerAll(rc, batch, cmds)
	clear(cmds)
	clear(evals)
	if failed == nil { // a nil *Shared would be a non-nil error
		return evals[:0], cmds[:0], nil
	}
	return evals[:0], cmds[:0], failed
}

// answerAll reads the replies cmds into the calls of batch (one each),
// and returns the first network error among them, shared by the calls it
// failed (nil when none).
func answerAll(rc redis.UniversalClient, batch []*scriptCall, cmds []*redis.Cmd) *breaker.Shared {
	var failed *breaker.Shared // the connection's failure: the breaker counts it once
	for i, c := range batch {
		c.reply = replyOf(cmds[i])
		if ne := net.Error(nil); errors.As(c.reply.err, &ne) {
			if failed == nil {
				failed = &breaker.Shared{Err: c.reply.err}
			}
			c.reply.err = failed
		}
	}
	if failed != nil {
		reloadSlots(rc) // a Cluster's master may have died
	}
	return failed
}

// fail answers the calls queued with err, without sending them (Close).
func (p *Pipeliner) fail(err error) {
	for {
		select {
		case c := <-p.calls:
			c.reply.err = err
			c.done <- struct{}{}
		default:
			return
		}
	}
}
