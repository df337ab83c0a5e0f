package redisstore

// A script call as a Pipeliner carries it, from its caller to the batch
// it goes out in and back: the call, its reply, and the pooled envelope
// in which its caller waits for the reply.

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
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
