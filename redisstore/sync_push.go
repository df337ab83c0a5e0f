package redisstore

// Pushing in the two-layer store: Sync, one script call per key with
// something to send or to read back, all in one pipeline (TWO_LAYER.md).

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// syncCall is one key's script call of a sync.
type syncCall struct {
	evalCall
	sh   *syncShard
	ent  *store.Entry[syncEntry]
	wins []int64 // window index of every key
	res  []int64
	err  error
}

// Sync pushes every key's unsent counts to Redis and reads the shared
// totals back: one script call per key with unsent counts or a Take in the
// last two intervals, all in one pipeline. Keys idle for a whole window are
// dropped first. The goroutine calls it every Interval; tests call it
// directly. It returns (and reports through OnError) an error when some
// keys could not be synced; their counts are kept for the next sync.
func (s *SyncStore) Sync(ctx context.Context) error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	now := s.now().UnixMicro()
	s.nextSync.Store(now + s.intervalUS)
	calls := s.snapshot(now)
	if len(calls) == 0 {
		if s.pushedOK {
			s.recovered(now) // one held back by RecoverEvery, if any
		}
		return nil
	}
	for lo := 0; lo < len(calls); lo += syncBatch {
		s.push(ctx, calls[lo:min(lo+syncBatch, len(calls))])
	}
	failed := 0
	var first error
	lost := false // a call Redis did not answer
	for _, c := range calls {
		if c.err == nil && len(c.res) != len(c.keys) {
			c.err = fmt.Errorf("script answered %d values, want %d", len(c.res), len(c.keys))
		}
		if c.err != nil {
			failed++
			if first == nil {
				first = c.err
			}
			lost = lost || noAnswer(c.err)
		}
		s.apply(c)
	}
	s.pushedOK = failed == 0
	if failed == 0 {
		s.recovered(now)
		return nil
	}
	if lost {
		// On a Cluster, the next sync goes to the replica that took
		// over from a master that died, not to that master again.
		reloadSlots(s.c)
	}
	err := fmt.Errorf("redis sync store: %s: %d of %d keys not synced (kept for the next sync): %w", s.name, failed, len(calls), first)
	// A sync abandoned by Close is not worth a report: Close pushes again.
	if s.ctx.Err() == nil || !errors.Is(first, context.Canceled) {
		s.failedSyncs++
		if s.onError != nil {
			s.onError(err)
		}
	}
	return err
}

// recovered reports, through OnRecover, a sync at now that succeeded after
// failed ones (see SyncOptions.OnRecover). syncMu is held.
func (s *SyncStore) recovered(now int64) {
	if s.failedSyncs == 0 || s.onRecover == nil {
		return
	}
	if s.recoveredAt != 0 && now-s.recoveredAt < RecoverEvery.Microseconds() {
		return
	}
	n := s.failedSyncs
	s.failedSyncs, s.recoveredAt = 0, now
	s.onRecover(n)
}

// snapshot drops idle keys and prepares the call of every key to sync,
// moving its unsent counts from pend to fly.
func (s *SyncStore) snapshot(now int64) []*syncCall {
	var calls []*syncCall
	kpt := 1
	if s.sliding {
		kpt = 2
	}
	walkKeys(s.keys, func(sh *syncShard, ent *store.Entry[syncEntry]) {
		e := &ent.Value
		s.keepEnded(e, now)
		if !s.needsSync(e) {
			if !e.inFlight && s.idle(e, now) {
				sh.Remove(ent)
			}
			return
		}
		if e.esc == "" {
			e.esc = EscapeKey(ent.Key())
		}
		n := len(e.tiers)*kpt + 1 // the counters, then the block
		c := &syncCall{
			evalCall: evalCall{
				script: syncScript,
				keys:   make([]string, 0, n),
				args:   make([]any, 0, 2*n),
			},
			sh:   sh,
			ent:  ent,
			wins: make([]int64, 0, n),
		}
		for i := range e.tiers {
			p, tr := &s.tiers[i], &e.tiers[i]
			for k, sl := range [2]*syncSlot{&tr.cur, &tr.prev} {
				if k == 1 && !s.sliding {
					break
				}
				sl.fly += sl.pend
				sl.pend = 0
				c.keys = append(c.keys, s.head+e.esc+p.tail+strconv.FormatInt(sl.idx, 10))
				c.args = append(c.args, sl.fly, p.ttl)
				c.wins = append(c.wins, sl.idx)
			}
		}
		// The key's block: one this instance set, to write (with
		// its TTL), and in any case read back.
		var set, ttl int64
		if e.blockSend > now {
			set, ttl = e.blockSend, (e.blockSend-now+999)/1000
		}
		e.blockFly, e.blockSend = set, 0
		c.keys = append(c.keys, s.head+e.esc+blockTail)
		c.args = append(c.args, set, ttl)
		e.usedSnap = e.used
		if e.touched > 0 {
			e.touched--
		}
		e.inFlight = true
		calls = append(calls, c)
	})
	return calls
}

// keepEnded keeps out of the syncs the counts of e that an outage left
// unsent in windows that ended a window or more before now: no decision
// reads them any more, and sending them would write dead keys to a Redis
// just back. They stay in e's view (a Take whose clock is a little behind
// decides as before), and e can then go as idle.
func (s *SyncStore) keepEnded(e *syncEntry, now int64) {
	for i := range e.tiers {
		p, tr := &s.tiers[i], &e.tiers[i]
		counts := algorithms.WindowIndex(max(now, e.last), p.window) - 1 // the earliest window that still counts, with a window to spare
		if s.sliding {
			counts--
		}
		for _, sl := range [2]*syncSlot{&tr.cur, &tr.prev} {
			if sl.idx < counts && sl.pend != 0 {
				sl.shared += sl.pend
				sl.pend = 0
			}
		}
	}
}

func (s *SyncStore) needsSync(e *syncEntry) bool { return e.touched > 0 || e.unsent() }

// unsent reports whether e has counts or a block that no sync has sent.
func (e *syncEntry) unsent() bool {
	if e.blockSend != 0 {
		return true
	}
	for i := range e.tiers {
		tr := &e.tiers[i]
		if tr.cur.pend != 0 || tr.prev.pend != 0 {
			return true
		}
	}
	return false
}

// idle reports whether e saw no Take or Undo in the windows that still
// count at now (the current one; for sliding_window the previous one too).
func (s *SyncStore) idle(e *syncEntry, now int64) bool {
	t := max(now, e.last)
	if e.blockedUntil > t {
		return false
	}
	for i := range e.tiers {
		p := &s.tiers[i]
		lastW, nowW := algorithms.WindowIndex(e.last, p.window), algorithms.WindowIndex(t, p.window)
		if lastW >= nowW || s.sliding && lastW >= nowW-1 {
			return false
		}
	}
	return true
}

// push runs the calls in one pipeline (see evalAll).
func (s *SyncStore) push(ctx context.Context, calls []*syncCall) {
	evals := make([]*evalCall, len(calls))
	for i, c := range calls {
		evals[i] = &c.evalCall
	}
	for i, cmd := range evalAll(ctx, s.c, evals, make([]*redis.Cmd, 0, len(calls))) {
		calls[i].res, calls[i].err = cmd.Int64Slice()
	}
}

// apply records the outcome of c in its entry: the totals read back, or
// the counts sent returned to pend.
func (s *SyncStore) apply(c *syncCall) {
	sh := c.sh
	sh.Lock()
	defer sh.Unlock()
	if !sh.Holds(c.ent) { // evicted meanwhile
		return
	}
	e := &c.ent.Value
	e.inFlight = false
	if c.err == nil {
		// Redis's block (lifted there by an Unblock), or a newer one
		// set here since the snapshot.
		e.blockedUntil = max(c.res[len(c.res)-1], e.blockSend)
	} else if e.blockSend == 0 {
		e.blockSend = e.blockFly // sent again at the next sync
	}
	e.blockFly = 0
	// A failed sync renews the budget too: the instance goes on deciding
	// on what it knows rather than stopping (see the model).
	e.used -= min(e.used, e.usedSnap)
	e.usedSnap = 0
	kpt := len(c.wins) / len(e.tiers)
	for j, w := range c.wins {
		sl := e.tiers[j/kpt].slot(w)
		if sl == nil { // the window is no longer held
			continue
		}
		if c.err == nil {
			sl.shared = c.res[j]
		} else {
			sl.pend += sl.fly
		}
		sl.fly = 0
	}
}
