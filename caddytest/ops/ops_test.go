// Package ops holds operational tests of the rate_limit handler inside a
// real, in-process Caddy (Caddy's caddytest harness): config reloads under
// load, reloads that must leak nothing, client identity behind proxies, the
// Prometheus metrics on the admin endpoint, and the TTL of every Redis key.
//
// Its Caddy listens on ports of its own (admin localhost:2998, HTTP 9180,
// HTTPS 9543), so that it runs in parallel with the package
// caddytest/integration (2999, 9080) under `go test ./...`.
//
// Every test uses zone names of its own (a zone's state survives a config
// load when the zone is unchanged) and starts its own redis-server
// (internal/redistest). Windows are an hour or more, so that no count
// depends on timing; whatever happens asynchronously (goroutines ending,
// connections closing, the breaker) is polled with a bounded deadline.
package ops

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	_ "github.com/caddyserver/caddy/v2/modules/standard"
	_ "github.com/zonelimit/caddy-ratelimit"
)

const (
	adminPort = 2998
	httpPort  = 9180
	httpsPort = 9543

	base     = "http://127.0.0.1:9180"
	adminURL = "http://localhost:2998"
)

func TestMain(m *testing.M) {
	caddytest.Default.AdminPort = adminPort
	// Loads under -race on a busy machine can take seconds.
	caddytest.Default.LoadRequestTimeout = 30 * time.Second
	caddytest.Default.TestRequestTimeout = 30 * time.Second
	os.Exit(m.Run())
}

// globals is the global options block: this package's ports, a grace
// period long enough that a reload never cuts a request short (the old
// server finishes what it accepted), no autosave (another test process may
// run a Caddy at the same time), and extra lines (e.g. a servers block).
func globals(extra string) string {
	return fmt.Sprintf(`{
	admin localhost:%d
	http_port %d
	https_port %d
	grace_period 10s
	default_bind 127.0.0.1
	persist_config off
%s
}
`, adminPort, httpPort, httpsPort, extra)
}

// load (re)configures the shared Caddy with the given Caddyfile (globals
// included) through caddytest, which starts Caddy on first use and checks
// that the config is running.
//
// Every config gets a site of its own, marker.test, answering a number new
// to each load, and load returns once that site serves every new
// connection: until then some could still reach the previous config's
// server (see waitServing).
func load(t *testing.T, caddyfile string) {
	t.Helper()
	marker := "load-" + strconv.FormatInt(loads.Add(1), 10)
	caddyfile += fmt.Sprintf("\nhttp://marker.test:%d {\n\trespond %q\n}\n", httpPort, marker)
	tc := caddytest.NewTester(t)
	tc.InitServer(caddyfile, "caddyfile")
	if t.Failed() {
		t.FailNow()
	}
	waitServing(t, marker, "/", "Host", "marker.test")
}

// loads numbers the configs load has loaded.
var loads atomic.Int64

// noKeepAlive is the client of every request of this package: a
// connection per request, so that neither this process nor Caddy keeps
// idle connections (and their goroutines) between requests, and a reload
// never meets a request on a connection the old server is closing.
var noKeepAlive = &http.Client{
	Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext:       (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	},
	Timeout: 30 * time.Second,
}

// post loads caddyfile with POST /load, as `caddy reload` does. With force
// (Cache-Control: must-revalidate) Caddy reloads even a config identical to
// the running one; without it, an identical config is a no-op.
func post(caddyfile string, force bool) error {
	req, err := http.NewRequest("POST", adminURL+"/load", strings.NewReader(caddyfile))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "text/caddyfile")
	if force {
		req.Header.Set("Cache-Control", "must-revalidate")
	}
	res, err := noKeepAlive.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		return fmt.Errorf("POST /load: %d %s", res.StatusCode, body)
	}
	return nil
}

type response struct {
	code int
	hdr  http.Header
	body string
	err  error
}

// do requests path on Caddy with header pairs ("Name", "value", ...; "Host"
// sets the Host). It never fails the test: err says what went wrong.
func do(path string, hdr ...string) response {
	req, err := http.NewRequest("GET", base+path, nil)
	if err != nil {
		return response{code: -1, err: err}
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := noKeepAlive.Do(req)
	if err != nil {
		return response{code: -1, err: err}
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return response{code: res.StatusCode, hdr: res.Header, body: string(body), err: err}
}

// get is do that fails the test on a transport error.
func get(t *testing.T, path string, hdr ...string) response {
	t.Helper()
	r := do(path, hdr...)
	if r.err != nil {
		t.Fatalf("GET %s: %v", path, r.err)
	}
	return r
}

// retryGet is get that tries again (up to 10 times) on a transport error.
//
// Caddy on Linux gives each config its own listening socket on the same
// port (SO_REUSEPORT) and closes the old one in the background after a
// reload (http app Stop only waits for the shutdowns to start, so this can
// be after POST /load has returned): a connection the kernel queued on the
// old socket is then reset before Caddy accepts it, so before any handler
// saw its request. Such a request was never decided and may be sent again.
// Connections the old server did accept are served to the end (grace_period
// 10s).
func retryGet(t *testing.T, path string, hdr ...string) response {
	t.Helper()
	var r response
	for range 10 {
		if r = do(path, hdr...); r.err == nil {
			return r
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("GET %s: %v", path, r.err)
	return r
}

func expectCode(t *testing.T, r response, code int, what string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: status %d, want %d (body %q, headers %v)", what, r.code, code, r.body, r.hdr)
	}
}

// remaining returns X-RateLimit-Remaining as a number (-1 if absent).
func remaining(t *testing.T, r response) int {
	t.Helper()
	v := r.hdr.Get("X-RateLimit-Remaining")
	if v == "" {
		return -1
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("X-RateLimit-Remaining %q", v)
	}
	return n
}

// scrape GETs the admin endpoint's /metrics and parses it. It fails the
// test unless the answer is 200 and well-formed exposition text (a family
// given twice, as a duplicate registration would, does not parse).
func scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	res, err := noKeepAlive.Get(adminURL + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("reading /metrics: %v", err)
	}
	if res.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d %s", res.StatusCode, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v\n%s", err, body)
	}
	return fams
}

// sample finds the series of family name whose labels include want
// (name=value pairs).
func sample(fams map[string]*dto.MetricFamily, name string, want ...string) (*dto.Metric, bool) {
	f := fams[name]
	if f == nil {
		return nil, false
	}
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(want); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == want[i] && lp.GetValue() == want[i+1] {
					found = true
					break
				}
			}
			if !found {
				continue next
			}
		}
		return m, true
	}
	return nil, false
}

// value is the value of a counter or gauge series (-1 when absent).
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	m, ok := sample(fams, name, labels...)
	if !ok {
		return -1
	}
	if c := m.GetCounter(); c != nil {
		return c.GetValue()
	}
	if g := m.GetGauge(); g != nil {
		return g.GetValue()
	}
	return -1
}

// waitFor polls cond every 20ms until it is true or timeout passes, and
// reports whether it became true.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitServing waits until 10 connections in a row to path (with header
// pairs hdr) are answered with body: the config just loaded serves every
// new connection. After POST /load returns, the previous config's
// listening socket is closed in the background (see retryGet), and until
// then the kernel may hand it new connections.
func waitServing(t *testing.T, body, path string, hdr ...string) {
	t.Helper()
	seen := 0
	if !waitFor(5*time.Second, func() bool {
		if r := do(path, hdr...); r.err == nil && r.body == body {
			seen++
		} else {
			seen = 0
		}
		return seen >= 10
	}) {
		t.Fatalf("the config answering %q never served 10 connections in a row", body)
	}
}
