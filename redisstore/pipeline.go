package redisstore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Pipeliner sends the script calls of concurrent requests to Redis in
// pipelines: what its workers find waiting when they are free goes out in
// one write and comes back in one read. Each decision is still one
// EVALSHA, answered as soon as its pipeline is; what it saves is the
// system calls and wake-ups of a round trip per request, which on a busy
// instance cost as much as serving the request itself. Under light load a
// call goes out alone, at once.
//
// A Pipeliner belongs to one client; the Stores built with it (Options) and
// the client share its workers. It is safe for concurrent use.
type Pipeliner struct {
	c     redis.UniversalClient
	wait  time.Duration // how long a caller waits for its reply at most
	calls chan *scriptCall
	stop  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
}

// Pipeliner sizing: pipelineWorkers pipelines in flight at once (so a slow
// reply does not hold up every request), at most maxPipeline calls each.
const (
	pipelineWorkers = 4
	maxPipeline     = 128
	callQueue       = 1024
)

// evalCall is one script call: its script, KEYS and ARGV.
type evalCall struct {
	script *redis.Script
	keys   []string
	args   []any
}

// scriptCall is one script call waiting for a pipeline.
type scriptCall struct {
	evalCall
	cmd  *redis.Cmd // the reply; nil with err set when never sent
	err  error
	done chan struct{}

	// deadline is when the caller stops waiting (Pipeliner.wait after it
	// queued the call), timed by timer (kept with the pooled call): a call
	// still queued then is not sent at all.
	deadline time.Time
	timer    *time.Timer
}

var callPool = sync.Pool{New: func() any { return &scriptCall{done: make(chan struct{}, 1)} }}

// NewPipeliner starts the workers of a Pipeliner on c. A caller waits at
// most wait for its reply, however long its call queued behind the
// pipelines of others (a hung Redis holds every worker for a timeout): wait
// is one round trip's timeouts (the client's write and read timeouts), so a
// failing Redis costs a call one timeout, not one per pipeline ahead of
// it. Zero: no bound but the client's timeouts. Close stops the workers.
func NewPipeliner(c redis.UniversalClient, wait time.Duration) *Pipeliner {
	p := &Pipeliner{c: c, wait: wait, calls: make(chan *scriptCall, callQueue), stop: make(chan struct{})}
	p.wg.Add(pipelineWorkers)
	for i := 0; i < pipelineWorkers; i++ {
		go p.work()
	}
	return p
}

// Close stops the workers and waits for them; calls still queued fail.
// It may be called more than once.
func (p *Pipeliner) Close() {
	p.once.Do(func() {
		close(p.stop)
		p.wg.Wait()
		for {
			select {
			case c := <-p.calls:
				c.err = redis.ErrClosed
				c.done <- struct{}{}
			default:
				return
			}
		}
	})
}

// run calls script with keys and args in the next pipeline and returns its
// reply. A ctx done before the reply returns ctx's error (the call may still
// be applied in Redis).
func (p *Pipeliner) run(ctx context.Context, script *redis.Script, keys []string, args []any) (*redis.Cmd, error) {
	c := callPool.Get().(*scriptCall)
	c.evalCall = evalCall{script, keys, args}
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
	select {
	case p.calls <- c:
	case <-p.stop:
		return nil, redis.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-expired:
		return nil, errQueueTimeout
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		// The worker still owns c: it is not put back.
		return nil, ctx.Err()
	case <-expired:
		// Likewise; the worker does not send it if it has not yet.
		return nil, errQueueTimeout
	case <-p.stop:
		return nil, redis.ErrClosed
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	cmd, err := c.cmd, c.err
	*c = scriptCall{done: c.done, timer: c.timer}
	callPool.Put(c)
	if err != nil {
		return nil, err
	}
	return cmd, cmd.Err()
}

// errQueueTimeout fails a call whose reply did not come within the
// Pipeliner's wait (a Redis that hangs, holding every worker).
var errQueueTimeout = errors.New("redis: no reply within the read and write timeouts (calls queued behind pipelines that did not return)")

func (p *Pipeliner) work() {
	defer p.wg.Done()
	batch := make([]*scriptCall, 0, maxPipeline)
	evals := make([]*evalCall, 0, maxPipeline)
	cmds := make([]*redis.Cmd, 0, maxPipeline)
	for {
		batch = batch[:0]
		select {
		case c := <-p.calls:
			batch = append(batch, c)
		case <-p.stop:
			return
		}
	fill:
		for len(batch) < maxPipeline {
			select {
			case c := <-p.calls:
				batch = append(batch, c)
			default:
				break fill
			}
		}
		// A call whose caller stopped waiting while it queued is not
		// sent: a hung Redis would only hold this worker for another
		// timeout.
		now := time.Now()
		sent := batch[:0]
		for _, c := range batch {
			if !c.deadline.IsZero() && !now.Before(c.deadline) {
				c.err = errQueueTimeout
				c.done <- struct{}{}
				continue
			}
			sent = append(sent, c)
			evals = append(evals, &c.evalCall)
		}
		batch = sent
		if len(batch) > 0 {
			// The client's timeouts bound the pipeline; a caller
			// whose ctx ends or whose wait passes stops waiting for
			// it (see run).
			cmds = evalAll(context.Background(), p.c, evals, cmds[:0])
		}
		for i, c := range batch {
			c.cmd = cmds[i]
			c.done <- struct{}{}
		}
		clear(cmds)
		clear(evals)
		evals = evals[:0]
	}
}

// evalAll is how every script call of the package reaches Redis: calls
// go as one pipeline of EVALSHA, then those whose script Redis did not have
// (NOSCRIPT: a restart, a failover) as one of EVAL, which caches it again.
// It appends the reply of every call to cmds, in order. Only a NOSCRIPT
// reply is sent again: a timeout or a refused connection fails the calls at
// once, so a failing Redis costs a call one timeout.
func evalAll(ctx context.Context, c redis.UniversalClient, calls []*evalCall, cmds []*redis.Cmd) []*redis.Cmd {
	first := len(cmds)
	pipe := c.Pipeline()
	for _, e := range calls {
		cmds = append(cmds, e.script.EvalSha(ctx, pipe, e.keys, e.args...))
	}
	_, err := pipe.Exec(ctx)
	unanswered(cmds[first:], err)
	var retry redis.Pipeliner
	var retried []*redis.Cmd
	for i, e := range calls {
		if err := cmds[first+i].Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			if retry == nil {
				retry = c.Pipeline()
			}
			cmds[first+i] = e.script.Eval(ctx, retry, e.keys, e.args...)
			retried = append(retried, cmds[first+i])
		}
	}
	if retry != nil {
		_, err := retry.Exec(ctx)
		unanswered(retried, err)
	}
	return cmds
}

// evalOne runs one script call on its own (see evalAll).
func evalOne(ctx context.Context, c redis.UniversalClient, script *redis.Script, keys []string, args []any) *redis.Cmd {
	var cmds [1]*redis.Cmd
	return evalAll(ctx, c, []*evalCall{{script, keys, args}}, cmds[:0])[0]
}

// errNoReply fails a call that a pipeline never answered and for which it
// returned no error either.
var errNoReply = errors.New("redis: no reply to the script call in its pipeline")

// unanswered gives the pipeline's error err to the calls of cmds that got
// no reply. go-redis leaves them without an error when err is a Redis error
// reply that came before any command was sent: the AUTH or HELLO of a new
// connection refused (WRONGPASS, NOAUTH), for example. Their reply would
// otherwise read as an empty value ("unexpected type=<nil>"), not as the
// failure it is. A call that was answered always has a value or an error:
// every script returns a value, and a nil one is the error redis.Nil.
func unanswered(cmds []*redis.Cmd, err error) {
	if err == nil {
		err = errNoReply
	}
	for _, cmd := range cmds {
		if cmd.Err() == nil && cmd.Val() == nil {
			cmd.SetErr(err)
		}
	}
}
