package redisstore

import (
	"context"
	"errors"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Closed reports whether err is a call's failure on a client closed under
// it (the config that made it was unloaded): nothing can send it any more.
func Closed(err error) bool {
	return errors.Is(err, redis.ErrClosed) || errors.Is(err, net.ErrClosed)
}

// SlotRefused reports whether err is, or wraps, Redis refusing a call
// for its slot alone without running it: TRYAGAIN, while a Cluster slot
// being moved holds part of the call's keys on each side (evalAll has sent
// it again already). A circuit breaker should not count it: the master
// answered, and a breaker it opened would send every key of that master
// to on_error, then close at its next probe and open again, for as long as
// the move lasts. Only the keys of the moving slot go to on_error.
func SlotRefused(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "TRYAGAIN")
}

// While a Redis Cluster moves a key's slot between masters, a command on
// several of its keys (a reset's DEL, a peek's script) is answered
// TRYAGAIN when some have moved and some not; one on its block key alone
// is redirected (ASK), which go-redis follows. An operator's reset or look
// (RetryMoved) is tried again for a moment rather than failed: first after
// moveRetryFirst, then twice as late each time, for moveRetryFor at most.
const (
	moveRetryFirst = 50 * time.Millisecond
	moveRetryFor   = 5 * time.Second
)

// RetryMoved runs op, and again while it fails with TRYAGAIN (see
// moveRetryFor) and ctx lasts: for an operator's call, which can wait.
func RetryMoved(ctx context.Context, op func() error) error {
	deadline := time.Now().Add(moveRetryFor)
	wait := moveRetryFirst
	for {
		err := op()
		if !SlotRefused(err) || time.Now().Add(wait).After(deadline) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
		wait *= 2
	}
}

// Hint says what to look at for the Redis errors that answer PING but
// refuse every decision, or whose text does not say plainly what is wrong.
// Empty for the others.
func Hint(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	switch {
	case hasCode(s, "WRONGPASS"), hasCode(s, "NOAUTH"), strings.Contains(s, "Protocol error: unauthenticated"):
		return "authentication failed: check the redis username and password"
	case hasCode(s, "NOPERM"):
		return "the Redis user lacks a permission: it needs EVALSHA, EVAL and the keys under key_prefix"
	case hasCode(s, "OOM"):
		return "Redis is out of memory (maxmemory) and refuses writes"
	case hasCode(s, "READONLY"):
		return "this Redis is a read-only replica: address the master"
	}
	return ""
}

// hasCode reports whether the error text s holds the Redis error code code
// as a word followed by a space ("OOM command not allowed ...", after the
// store's own prefix).
func hasCode(s, code string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], code)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(code)
		if (j == 0 || s[j-1] == ' ') && end < len(s) && s[end] == ' ' {
			return true
		}
		i = end
	}
}
