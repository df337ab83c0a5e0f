package redisstore

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// noAnswer reports whether err is the failure of a call that Redis did not
// answer (a refused or broken connection, a timeout), rather than Redis's
// error reply or its caller cancelling it.
func noAnswer(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	reply := redis.Error(nil)
	return !errors.As(err, &reply)
}

// reloadSlots has c, when a Cluster client, reload its slot map, after a
// call that Redis did not answer: a master that died answers nothing, not
// MOVED, so go-redis would go on sending its slots' calls there, after its
// replica took over, until its slot map is ClusterStateReloadInterval (a
// minute) old. The reload runs in the background, at most one at a time.
func reloadSlots(c redis.UniversalClient) {
	if own, ok := c.(*Client); ok {
		c = own.UniversalClient
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		cc.ReloadState(context.Background())
	}
}
