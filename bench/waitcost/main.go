// Command waitcost is a bare net/http server that prices a wait in the
// middle of a request, with no rate limiter and no network behind the wait.
// bench/waitcost.sh drives it with wrk and compares its CPU per request on
// three paths:
//
//	/now    answers at once
//	/alone  hands the request to a helper goroutine that answers it at once:
//	        the request blocks, alone
//	/batch  queues the request for a helper that answers every request
//	        queued meanwhile at once, after the runnable requests have had
//	        their turn: the request waits in a batch, as a call to Redis
//	        waits in a pipeline's batch
//
//	go run ./bench/waitcost -addr 127.0.0.1:8080
package main

import (
	"flag"
	"log"
	"net/http"
	"runtime"
	"sync"
)

// waiter is a request's handle on its answer.
type waiter struct{ done chan struct{} }

// batcher answers the waiters queued since its last batch, all at once.
type batcher struct {
	mu    sync.Mutex
	queue []*waiter
	kick  chan struct{} // a batch has a waiter (one token at most)
}

func (b *batcher) wait(w *waiter) {
	b.mu.Lock()
	b.queue = append(b.queue, w)
	b.mu.Unlock()
	select {
	case b.kick <- struct{}{}:
	default:
	}
	<-w.done
}

func (b *batcher) run() {
	for range b.kick {
		// Let the runnable requests queue first, as a pipeline's next
		// batch fills while the one ahead is in flight.
		runtime.Gosched()
		b.mu.Lock()
		batch := b.queue
		b.queue = nil
		b.mu.Unlock()
		for _, w := range batch {
			w.done <- struct{}{}
		}
	}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "the address to serve on")
	flag.Parse()

	waiters := sync.Pool{New: func() any { return &waiter{done: make(chan struct{}, 1)} }}
	alone := make(chan *waiter, 1024)
	go func() {
		for w := range alone {
			w.done <- struct{}{}
		}
	}()
	b := &batcher{kick: make(chan struct{}, 1)}
	go b.run()

	ok := []byte("ok")
	mux := http.NewServeMux()
	mux.HandleFunc("/now", func(rw http.ResponseWriter, _ *http.Request) { rw.Write(ok) })
	mux.HandleFunc("/alone", func(rw http.ResponseWriter, _ *http.Request) {
		w := waiters.Get().(*waiter)
		alone <- w
		<-w.done
		waiters.Put(w)
		rw.Write(ok)
	})
	mux.HandleFunc("/batch", func(rw http.ResponseWriter, _ *http.Request) {
		w := waiters.Get().(*waiter)
		b.wait(w)
		waiters.Put(w)
		rw.Write(ok)
	})
	log.Fatal(http.ListenAndServe(*addr, mux))
}
