package redisstore

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
)

// A Store's call encoded in place (appendCall, from the Store's encoded
// constants) is the EVALSHA built from its KEYS and ARGV as go-redis gets
// them, for every algorithm, a Take and an Undo, with and without an
// instant, costs of one digit and more, a key that is escaped or hashed,
// limits changed by Under and a margin changed after the store was built.
func TestStoreCallEncoding(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialed
	defer c.Close()
	cfg := algorithms.Config{Tiers: []algorithms.Tier{{Events: 10, Window: time.Minute}, {Events: 100, Window: time.Hour}}, CountRejected: true}
	for _, name := range algorithms.Names {
		cfg := cfg
		if name == algorithms.Concurrency {
			cfg.Tiers, cfg.CountRejected = cfg.Tiers[:1], false
		}
		s, err := NewStore(c, mustLimiter(t, name, cfg), Options{KeyPrefix: "rl:", Zone: "z", BlockFor: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		u, err := s.Under(mustLimiter(t, name, oneTier(7, time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		u.(*Store).setMargin(time.Hour)
		for _, st := range []*Store{s, u.(*Store)} {
			for _, sc := range []storeCall{
				{key: "10.0.0.1", cost: 1, n: 1},
				{key: "a {b}%c\r\n", now: t0, cost: 1 << 40, n: 1 << 50},
				{key: "", undo: true, now: t0, cost: 3, n: 12345},
				{key: "k", undo: true, cost: 1, n: 0},
				{key: "zero", cost: 0, n: 2},
				{key: "ten", now: t0, cost: 10, n: 3},
				{key: strings.Repeat("long{", 30), cost: 9, n: 4},
			} {
				sc.s = st
				e := evalCall{script: st.script.run, take: sc}
				got := appendEvalSha(nil, &e)
				keys, args := e.keysArgs()
				want := appendEvalSha(nil, &evalCall{script: e.script, keys: keys, args: args})
				if !bytes.Equal(got, want) {
					t.Errorf("%s %+v:\nencoded %q\nwant    %q", name, sc, got, want)
				}
			}
		}
	}
}
