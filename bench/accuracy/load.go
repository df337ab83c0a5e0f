package main

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// response is what one request of a run got.
type response struct {
	// at is when Caddy received the request (its X-Accuracy-Time), or
	// when it was sent if the answer did not say.
	at     time.Time
	status int // 0: no response
}

// openLoop sends rate requests per second for d, at fixed instants
// whatever the responses (an open loop: a slow or refusing server does
// not slow the load down), round robin over urls, each with the header
// X-Case: key. It starts on a boundary of align (the limit's window, so
// that a run of whole windows covers whole aligned windows) and returns
// every request's response and how late the latest send was against its
// schedule.
func openLoop(ctx context.Context, client *http.Client, urls []string, key string, rate float64, d, align time.Duration) (start time.Time, out []response, lag time.Duration) {
	n := int(rate * d.Seconds())
	out = make([]response, n)
	start = time.Now().Add(align / 10).Truncate(align).Add(align)
	var wg sync.WaitGroup
	for i := range n {
		at := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		if w := time.Until(at); w > 0 {
			time.Sleep(w)
		} else {
			lag = max(lag, -w)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = send(ctx, client, urls[i%len(urls)], key)
		}()
	}
	wg.Wait()
	return start, out, lag
}

func send(ctx context.Context, client *http.Client, url, key string) response {
	r := response{at: time.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return r
	}
	req.Header.Set("X-Case", key)
	resp, err := client.Do(req)
	if err != nil {
		return r
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	r.status = resp.StatusCode
	if ms, err := strconv.ParseInt(resp.Header.Get("X-Accuracy-Time"), 10, 64); err == nil {
		r.at = time.UnixMilli(ms)
	}
	return r
}

// binned counts the responses, and those admitted (200), per bin from
// start for d, and returns the index since the Unix epoch of the first
// bin. The last requests, received after d, are left out of both counts:
// folded into the last bin they would be held to a window they were not
// decided in.
func binned(start time.Time, d, bin time.Duration, rs []response) (first int64, offered, admitted []int) {
	first = start.UnixNano() / int64(bin)
	n := int(d / bin)
	offered, admitted = make([]int, n), make([]int, n)
	for _, r := range rs {
		i := int(r.at.UnixNano()/int64(bin) - first)
		if i < 0 || i >= n {
			continue
		}
		offered[i]++
		if r.status == http.StatusOK {
			admitted[i]++
		}
	}
	return first, offered, admitted
}
