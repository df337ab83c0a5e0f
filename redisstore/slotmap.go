package redisstore

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// errEmptySlotMap is what a CLUSTER SLOTS that lists no slot fails with.
var errEmptySlotMap = errors.New("CLUSTER SLOTS lists no slot: the node is in no cluster")

// emptySlotMapHook, on every node client of a Cluster client, fails a
// CLUSTER SLOTS answered with no slot. A node that left the cluster
// (`redis-cli --cluster del-node` resets it) but is still up, and still
// among the configured addresses, answers so; go-redis, which reloads its
// slot map from one address taken at random, would take that map and send
// each key to a random node, which answers CLUSTERDOWN, until its next
// reload. Failed, the answer makes go-redis ask the next address instead.
type emptySlotMapHook struct{}

func (emptySlotMapHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (emptySlotMapHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if sc, ok := cmd.(*redis.ClusterSlotsCmd); ok && err == nil && len(sc.Val()) == 0 {
			err = errEmptySlotMap
			sc.SetErr(err)
		}
		return err
	}
}

func (emptySlotMapHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
