package redisstore

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// masterWatchInterval is how often a masterWatch asks a sentinel for the
// master's address.
const masterWatchInterval = 250 * time.Millisecond

// masterWatch tells a direct Pipeliner's connection, on a Sentinel client,
// that the master changed. go-redis moves its own pool to a new master as
// soon as its sentinel announces the switch, but the Pipeliner's
// connection would stay on the old one, which a graceful failover (SENTINEL
// FAILOVER) leaves up and taking writes until Sentinel demotes it, up to
// ten seconds later: every count, block and lease written there meanwhile
// is lost, and instances on the new master do not see them. The watch asks
// the sentinels for the master's address every masterWatchInterval; a new
// answer makes the connection dial again before its next batch (see
// directConn.send), through the client's dialer, which finds the new
// master.
type masterWatch struct {
	name      string
	sentinels []*redis.SentinelClient
	gen       atomic.Uint64 // bumped at each new master
	stop      chan struct{}
	done      chan struct{}
}

// newMasterWatch starts watching the master opts names, through opts'
// sentinels.
func newMasterWatch(opts *redis.UniversalOptions) *masterWatch {
	w := &masterWatch{name: opts.MasterName, stop: make(chan struct{}), done: make(chan struct{})}
	for _, addr := range opts.Addrs {
		w.sentinels = append(w.sentinels, redis.NewSentinelClient(&redis.Options{
			Addr:         addr,
			Username:     opts.SentinelUsername,
			Password:     opts.SentinelPassword,
			TLSConfig:    opts.TLSConfig,
			DialTimeout:  opts.DialTimeout,
			ReadTimeout:  opts.ReadTimeout,
			WriteTimeout: opts.WriteTimeout,
			PoolSize:     1,
			MaxRetries:   -1,
		}))
	}
	go w.run()
	return w
}

func (w *masterWatch) run() {
	defer close(w.done)
	t := time.NewTicker(masterWatchInterval)
	defer t.Stop()
	last, at := "", 0 // the master's last known address; the sentinel asked
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		addr, err := w.sentinels[at].GetMasterAddrByName(context.Background(), w.name).Result()
		if err != nil || len(addr) != 2 {
			at = (at + 1) % len(w.sentinels) // the next one, next time
			continue
		}
		if now := addr[0] + ":" + addr[1]; now != last {
			if last != "" {
				w.gen.Add(1)
			}
			last = now
		}
	}
}

// close stops the watch and closes its sentinel clients.
func (w *masterWatch) close() {
	close(w.stop)
	<-w.done
	for _, s := range w.sentinels {
		s.Close()
	}
}
