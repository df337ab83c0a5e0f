package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

// TestPipelinerAnswersOtherSlotsFirst: in a batch with a call that a slot
// being moved refuses (TRYAGAIN: one of its keys is on the source, one is
// not), the calls to other slots are answered at once; the refused call is
// sent again in the background and answered once its tries are over.
func TestPipelinerAnswersOtherSlotsFirst(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	c := clusterOpsClient(t, cl)
	ctx := context.Background()
	moving := "rlops:{moving}:a"
	slot := int(crc16("moving")) % clusterSlots
	if int(crc16("other"))%clusterSlots == slot {
		t.Fatal("the two hash tags share a slot: the test proves nothing")
	}
	if err := c.Set(ctx, moving, "1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	m := cl.BeginMigration(t, slot, cl.OtherMaster(t, slot))
	script := redis.NewScript(`return redis.call('EXISTS', KEYS[1]) + redis.call('EXISTS', KEYS[2])`)
	call := func(keys ...string) *scriptCall {
		return &scriptCall{evalCall: evalCall{script: script, keys: keys}, done: make(chan struct{}, 1)}
	}
	mv := call(moving, "rlops:{moving}:b")
	ot := call("rlops:{other}:a", "rlops:{other}:b")
	p := &Pipeliner{c: c.UniversalClient}
	_, _, later := p.sendBatch([]*scriptCall{mv, ot}, nil, nil)
	if len(later) != 1 || later[0] != mv {
		t.Fatalf("calls left for the background: %d, want the moving slot's one", len(later))
	}
	if ot.reply.err != nil || ot.reply.n != 1 || ot.reply.vals[0] != 0 {
		t.Fatalf("the other slot's call: %+v, want answered (0 keys exist)", ot.reply)
	}
	select {
	case <-ot.done:
		t.Fatal("sendBatch signalled the answered call: that is its worker's to do")
	default:
	}
	select {
	case <-mv.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the moving slot's call never answered")
	}
	if !SlotRefused(mv.reply.err) {
		t.Fatalf("the moving slot's call: %+v, want TRYAGAIN after its tries", mv.reply)
	}
	m.Finish()
}
