package redisstore

// A Pipeliner's batches through go-redis: the queue and the workers of
// NewPipeliner (a Cluster, whose pipelines go-redis splits by slot, or a
// client a direct connection cannot stand in for), and the batches of a
// direct Pipeliner once a hook is added (viaGoRedis), so that the hook
// sees every call.

import (
	"context"
	"errors"
	"net"
	"runtime"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/breaker"
)

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
