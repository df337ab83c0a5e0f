package redisstore

// The package's script calls through go-redis (a Cluster, a client with
// hooks, the EVAL after NOSCRIPT where SCRIPT LOAD did not help): pipelines of EVALSHA, each call sent
// again only when Redis refused it without running it.

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// evalAll is how the package's script calls reach Redis through go-redis:
// calls go as one pipeline of EVALSHA, then those whose script Redis did not have
// (NOSCRIPT: a restart, a failover) as one of EVAL, which caches it again.
// It appends the reply of every call to cmds, in order. Only a call that
// Redis refused without running its script is sent again: NOSCRIPT, and
// TRYAGAIN (a Cluster slot being moved holds part of the call's keys on
// each side; the call runs once they are together), the latter at most
// tryAgainAttempts times. A timeout or a refused connection fails the
// calls at once, so a failing Redis costs a call one timeout.
func evalAll(ctx context.Context, c redis.UniversalClient, calls []*evalCall, cmds []*redis.Cmd) []*redis.Cmd {
	first := len(cmds)
	cmds = evalFirst(ctx, c, calls, cmds)
	tryAgain(ctx, c, calls, cmds[first:])
	return cmds
}

// evalFirst is evalAll but for TRYAGAIN: those calls are left refused, for
// tryAgain.
func evalFirst(ctx context.Context, c redis.UniversalClient, calls []*evalCall, cmds []*redis.Cmd) []*redis.Cmd {
	first := len(cmds)
	cmds = pipelined(ctx, c, calls, cmds, true)
	sendAgain(ctx, c, calls, cmds[first:], "NOSCRIPT", false)
	return cmds
}

// tryAgain sends the calls whose reply in cmds (one per call) is TRYAGAIN
// again, up to tryAgainAttempts times, and puts their new replies in cmds.
func tryAgain(ctx context.Context, c redis.UniversalClient, calls []*evalCall, cmds []*redis.Cmd) {
	for i := range tryAgainAttempts {
		if !refused(cmds, "TRYAGAIN") || sleep(ctx, tryAgainBackoff<<i) != nil {
			return
		}
		sendAgain(ctx, c, calls, cmds, "TRYAGAIN", true)
		sendAgain(ctx, c, calls, cmds, "NOSCRIPT", false)
	}
}

// TRYAGAIN is sent again at most tryAgainAttempts times, after
// tryAgainBackoff, then twice and four times as long: 210ms in all, about
// the default read timeout, so that a short slot move costs a request no
// more than a failure would. The Pipeliner's workers answer the other
// calls of the pipeline first (see viaGoRedis).
const (
	tryAgainAttempts = 3
	tryAgainBackoff  = 30 * time.Millisecond
)

// refused reports whether a reply of cmds is an error starting with prefix.
func refused(cmds []*redis.Cmd, prefix string) bool {
	return slices.ContainsFunc(cmds, func(cmd *redis.Cmd) bool { return refusedWith(cmd, prefix) })
}

// refusedWith reports whether cmd's reply is an error starting with prefix.
func refusedWith(cmd *redis.Cmd, prefix string) bool {
	err := cmd.Err()
	return err != nil && redis.HasErrorPrefix(err, prefix)
}

// sendAgain sends the calls whose reply in cmds (one per call) is an error
// starting with prefix again, as one pipeline of EVALSHA (sha) or EVAL,
// and puts their new replies in cmds.
func sendAgain(ctx context.Context, c redis.UniversalClient, calls []*evalCall, cmds []*redis.Cmd, prefix string, sha bool) {
	var again []*evalCall
	var at []int
	for i, e := range calls {
		if refusedWith(cmds[i], prefix) {
			again = append(again, e)
			at = append(at, i)
		}
	}
	if len(again) > 0 {
		for i, cmd := range pipelined(ctx, c, again, nil, sha) {
			cmds[at[i]] = cmd
		}
	}
}

// sleep waits for d, or until ctx is done (its error).
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// evalSource sends the calls as one pipeline of EVAL, with the scripts'
// source, and appends their replies to cmds.
func evalSource(ctx context.Context, c redis.UniversalClient, calls []*evalCall, cmds []*redis.Cmd) []*redis.Cmd {
	return pipelined(ctx, c, calls, cmds, false)
}

// noRetryCmd is a script call that go-redis never sends again on its own.
// On a Cluster, when the first call of a node's pipeline is refused with
// an error it retries (TRYAGAIN, LOADING), go-redis sends that node's
// whole pipeline again, and the calls that did run would be charged
// twice; evalAll sends again only the calls that were refused.
type noRetryCmd struct{ *redis.Cmd }

// NoRetry implements redis.Cmder.
func (noRetryCmd) NoRetry() bool { return true }

// noRetryPipe queues a Script's EVAL and EVALSHA as noRetryCmds.
type noRetryPipe struct{ redis.Pipeliner }

func (p noRetryPipe) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return p.eval(ctx, "eval", script, keys, args)
}

func (p noRetryPipe) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return p.eval(ctx, "evalsha", sha, keys, args)
}

func (p noRetryPipe) eval(ctx context.Context, name, body string, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, body, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	cmd := redis.NewCmd(ctx, append(a, args...)...)
	_ = p.Process(ctx, noRetryCmd{cmd})
	return cmd
}

// pipelined sends the calls as one pipeline, each as EVALSHA (sha) or
// EVAL, and appends their replies to cmds.
func pipelined(ctx context.Context, c redis.UniversalClient, calls []*evalCall, cmds []*redis.Cmd, sha bool) []*redis.Cmd {
	first := len(cmds)
	pipe := noRetryPipe{c.Pipeline()}
	for _, e := range calls {
		keys, args := e.keysArgs()
		if sha {
			cmds = append(cmds, e.script.EvalSha(ctx, pipe, keys, args...))
		} else {
			cmds = append(cmds, e.script.Eval(ctx, pipe, keys, args...))
		}
	}
	_, err := pipe.Exec(ctx)
	unanswered(cmds[first:], err)
	return cmds
}

// evalOne runs one script call on its own (see evalAll).
func evalOne(ctx context.Context, c redis.UniversalClient, script *redis.Script, keys []string, args []any) *redis.Cmd {
	var cmds [1]*redis.Cmd
	return evalAll(ctx, c, []*evalCall{{script: script, keys: keys, args: args}}, cmds[:0])[0]
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
