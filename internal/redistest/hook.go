package redistest

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// NopHook is a go-redis hook that hands every dial, command and pipeline
// on unchanged. A test's hook embeds it and declares only the methods in
// which it does something.
type NopHook struct{}

func (NopHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (NopHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (NopHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// ScriptCalls is a go-redis hook (a client's AddHook) that counts the
// script calls (EVALSHA and EVAL) the client sends, alone or in pipelines,
// that Match accepts (nil: every one).
type ScriptCalls struct {
	NopHook
	Match func(cmd redis.Cmder) bool
	n     atomic.Int64
}

// Load returns how many calls it counted.
func (h *ScriptCalls) Load() int64 { return h.n.Load() }

func (h *ScriptCalls) count(cmd redis.Cmder) {
	if n := cmd.Name(); (n == "evalsha" || n == "eval") && (h.Match == nil || h.Match(cmd)) {
		h.n.Add(1)
	}
}

func (h *ScriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *ScriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return next(ctx, cmds)
	}
}
