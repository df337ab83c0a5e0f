package redisstore

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Pipeliner sends the script calls of concurrent requests to Redis in
// pipelines: what queued while the pipeline ahead was in flight goes out
// in one write and comes back in one read. Each decision is still one
// EVALSHA, answered as soon as its pipeline is; what it saves is the
// system calls and wake-ups of a round trip per request, which on a busy
// instance cost as much as serving the request itself. Under light load a
// call goes out alone, at once.
//
// Workers send the calls as go-redis pipelines (see work), which on a
// Cluster route each call to its slot's master; on a single node or a
// Sentinel's master, a NewDirectPipeliner has no worker: its callers write
// the calls on a connection of its own and read the replies themselves
// (see directConn and runDirect).
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
