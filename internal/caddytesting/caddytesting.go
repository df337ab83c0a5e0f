// Package caddytesting holds the helpers of the tests that run the
// rate_limit handler inside a real, in-process Caddy (Caddy's caddytest
// harness), in the packages caddytest/integration and caddytest/ops: loading
// a config and waiting until it serves, requests, expectations on the
// responses, and the admin endpoint's metrics.
package caddytesting

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/zonelimit/caddy-ratelimit/internal/testports"
)

// RedisBlock is a Caddyfile redis block (the lines inside a rate_limit
// handler, indented for it) for the Redis at addr (addresses separated by
// spaces for a Cluster), with the lines given (e.g. "pool_size 8") and
// timeouts that a busy test machine stays within. The default read
// timeout (250ms) is shorter than a loaded machine can stall Redis, and a
// timed-out decision goes to on_error: admitted uncounted, or a 503,
// either of which fails a test that counts what Redis decided.
func RedisBlock(addr string, lines ...string) string {
	var b strings.Builder
	b.WriteString("\t\tredis {\n\t\t\taddress " + addr + "\n")
	for _, l := range slices.Concat(lines, []string{"dial_timeout 5s", "read_timeout 10s", "write_timeout 10s"}) {
		b.WriteString("\t\t\t" + l + "\n")
	}
	b.WriteString("\t\t}\n")
	return b.String()
}

// Caddy is the in-process Caddy of a test package: the ports its configs
// use. A package has its own ports, so that packages run in parallel under
// `go test ./...`; New picks free ones, so that a suite also runs beside
// another program or test suite that holds caddytest's fixed ports.
type Caddy struct {
	AdminPort int
	HTTPPort  int
	HTTPSPort int

	// GracePeriod is the servers' grace_period: how long a reload lets the
	// old servers finish what they accepted.
	GracePeriod string

	loads atomic.Int64 // configs loaded, to number their markers

	// reserved holds the ports' reservations (a file the collector
	// closed would let go of its port) for as long as the process runs.
	reserved [3]*os.File
}

// New returns a Caddy on three ports of 127.0.0.1, free when it was called
// and reserved for the process (package testports: Caddy binds them at its
// first load, and again after a load without them), whose servers have
// gracePeriod.
func New(gracePeriod string) *Caddy {
	c := &Caddy{GracePeriod: gracePeriod}
	for i, port := range []*int{&c.AdminPort, &c.HTTPPort, &c.HTTPSPort} {
		p, f, err := testports.Reserve()
		if err != nil {
			panic(fmt.Sprintf("caddytesting: no free port: %v", err))
		}
		*port, c.reserved[i] = p, f
	}
	return c
}

// Main runs a package's tests against c, as its TestMain:
//
//	func TestMain(m *testing.M) { live.Main(m) }
//
// c becomes the Caddy of Caddy's caddytest harness (the admin port its
// testers and AssertLoadError call), with request timeouts that loads under
// -race on a busy machine stay within.
func (c *Caddy) Main(m *testing.M) {
	caddytest.Default.AdminPort = c.AdminPort
	caddytest.Default.LoadRequestTimeout = 30 * time.Second
	caddytest.Default.TestRequestTimeout = 30 * time.Second
	os.Exit(m.Run())
}

// URL is the address of path on the HTTP port.
func (c *Caddy) URL(path string) string {
	return fmt.Sprintf("http://127.0.0.1:%d%s", c.HTTPPort, path)
}

// AdminURL is the address of path on the admin endpoint.
func (c *Caddy) AdminURL(path string) string {
	return fmt.Sprintf("http://localhost:%d%s", c.AdminPort, path)
}

// Globals is the global options block: the ports, the grace period, no
// autosave (another test process may run a Caddy at the same time), and
// extra lines (e.g. a servers or log block).
func (c *Caddy) Globals(extra string) string {
	return fmt.Sprintf(`{
	admin localhost:%d
	http_port %d
	https_port %d
	grace_period %s
	default_bind 127.0.0.1
	persist_config off
%s
}
`, c.AdminPort, c.HTTPPort, c.HTTPSPort, c.GracePeriod, extra)
}

// Site is a Caddyfile site on the HTTP port, any host: a rate_limit block
// of rateLimit (zones and handler options), then directives (the rest of
// the site).
func (c *Caddy) Site(rateLimit, directives string) string {
	return c.HostSite("", rateLimit, directives)
}

// HostSite is Site for one host.
func (c *Caddy) HostSite(host, rateLimit, directives string) string {
	return fmt.Sprintf("\nhttp://%s:%d {\n\trate_limit {\n%s\n\t}\n\t%s\n}\n", host, c.HTTPPort, rateLimit, directives)
}

// ClientKey is the key of a zone that counts each X-Client header value
// apart.
const ClientKey = "key {http.request.header.X-Client}"

// Zone is a zone block of a rate_limit block: the zone's Caddyfile lines
// (key, limit, match, ...) in a block named name.
func Zone(name string, lines ...string) string {
	return "\t\tzone " + name + " {\n\t\t\t" + strings.Join(lines, "\n\t\t\t") + "\n\t\t}\n"
}

// MatchPath is the match block of a zone that applies to path only.
func MatchPath(path string) string {
	return "match {\n\t\t\t\tpath " + path + "\n\t\t\t}"
}

// Marker is a response body new to each load, which the config being
// loaded answers on the host marker.test: once that host answers it on
// every new connection, the config serves (see WaitServing).
func (c *Caddy) Marker() string {
	return "load-" + strconv.FormatInt(c.loads.Add(1), 10)
}

// MarkerSite is the Caddyfile site of marker.test answering marker.
func (c *Caddy) MarkerSite(marker string) string {
	return fmt.Sprintf("\nhttp://marker.test:%d {\n\trespond %q\n}\n", c.HTTPPort, marker)
}

// Load (re)configures Caddy with caddyfile (global options included), to
// which it adds the marker.test site, and returns once the new config
// serves every new connection.
func (c *Caddy) Load(t *testing.T, caddyfile string) *caddytest.Tester {
	t.Helper()
	marker := c.Marker()
	return c.LoadMarked(t, caddyfile+c.MarkerSite(marker), "caddyfile", marker)
}

// LoadSites is Load of sites under Globals("").
func (c *Caddy) LoadSites(t *testing.T, sites string) *caddytest.Tester {
	t.Helper()
	return c.Load(t, c.Globals("")+sites)
}

// LoadMarked (re)configures Caddy with config, in the given adapter's
// format, through caddytest (which starts Caddy on first use and checks
// that the config runs). The config must answer marker on marker.test:
// LoadMarked returns once it does on every new connection.
func (c *Caddy) LoadMarked(t *testing.T, config, adapter, marker string) *caddytest.Tester {
	t.Helper()
	tc := caddytest.NewTester(t)
	tc.InitServer(config, adapter)
	if t.Failed() {
		t.FailNow()
	}
	c.WaitServing(t, marker, "/", "Host", "marker.test")
	return tc
}

// WaitServing waits until 10 connections in a row to path (with header
// pairs hdr) are answered with body: the config just loaded serves every
// new connection. After a load, the previous config's listening socket is
// closed in the background, and until then the kernel may hand it new
// connections (see RetryGet).
func (c *Caddy) WaitServing(t *testing.T, body, path string, hdr ...string) {
	t.Helper()
	seen := 0
	if !WaitFor(5*time.Second, func() bool {
		if r := c.Do(path, hdr...); r.Err == nil && r.Body == body {
			seen++
		} else {
			seen = 0
		}
		return seen >= 10
	}) {
		t.Fatalf("the config answering %q never served 10 connections in a row", body)
	}
}

// Post loads caddyfile with POST /load, as `caddy reload` does. With force
// (Cache-Control: must-revalidate) Caddy reloads even a config identical to
// the running one; without it, an identical config is a no-op.
func (c *Caddy) Post(caddyfile string, force bool) error {
	req, err := http.NewRequest("POST", c.AdminURL("/load"), strings.NewReader(caddyfile))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "text/caddyfile")
	if force {
		req.Header.Set("Cache-Control", "must-revalidate")
	}
	r := Send(NoKeepAlive, req)
	if r.Err == nil && r.Code != 200 {
		return fmt.Errorf("POST /load: %d %s", r.Code, r.Body)
	}
	return r.Err
}

// LoadError posts caddyfile, which must not load, and returns the error
// Caddy answers.
func (c *Caddy) LoadError(t *testing.T, caddyfile string) string {
	t.Helper()
	err := c.Post(caddyfile, false)
	if err == nil {
		t.Fatal("the config loaded")
	}
	return err.Error()
}

// NoKeepAlive is the client of the requests: a connection per request, so
// that neither the test nor Caddy keeps idle connections (and their
// goroutines) between requests, and a reload never meets a request on a
// connection the old server is closing.
var NoKeepAlive = &http.Client{
	Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext:       (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	},
	Timeout: 30 * time.Second,
}

// Response is what a request got.
type Response struct {
	Code   int // -1 on a transport error
	Header http.Header
	Body   string
	Err    error // a transport error
}

// Request is a GET of path with header pairs ("Name", "value", ...;
// "Host" sets the Host).
func (c *Caddy) Request(path string, hdr ...string) *http.Request {
	req, err := http.NewRequest("GET", c.URL(path), nil)
	if err != nil {
		panic(err) // a test's path that is no URL path
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return req
}

// Send sends req with client. It never fails the test: Err says what went
// wrong.
func Send(client *http.Client, req *http.Request) Response {
	res, err := client.Do(req)
	if err != nil {
		return Response{Code: -1, Err: err}
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return Response{Code: res.StatusCode, Header: res.Header, Body: string(body), Err: err}
}

// Do requests path with header pairs (see Request). It never fails the
// test: Err says what went wrong.
func (c *Caddy) Do(path string, hdr ...string) Response {
	return Send(NoKeepAlive, c.Request(path, hdr...))
}

// Get is Do that fails the test on a transport error.
func (c *Caddy) Get(t *testing.T, path string, hdr ...string) Response {
	t.Helper()
	r := c.Do(path, hdr...)
	if r.Err != nil {
		t.Fatalf("GET %s: %v", path, r.Err)
	}
	return r
}

// RetryGet is Get that tries again (up to 10 times) on a transport error.
//
// Caddy on Linux gives each config its own listening socket on the same
// port (SO_REUSEPORT) and closes the old one in the background after a
// reload (http app Stop only waits for the shutdowns to start, so this can
// be after POST /load has returned): a connection the kernel queued on the
// old socket is then reset before Caddy accepts it, so before any handler
// saw its request. Such a request was never decided and may be sent again.
// Connections the old server did accept are served to the end (within the
// grace period).
func (c *Caddy) RetryGet(t *testing.T, path string, hdr ...string) Response {
	t.Helper()
	var r Response
	for range 10 {
		if r = c.Do(path, hdr...); r.Err == nil {
			return r
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("GET %s: %v", path, r.Err)
	return r
}

// ExpectCode fails the test unless r has status code.
func ExpectCode(t *testing.T, r Response, code int, what string) {
	t.Helper()
	if r.Code != code {
		t.Fatalf("%s: status %d, want %d (body %q, headers %v)", what, r.Code, code, r.Body, r.Header)
	}
}

// ExpectCodes sends a request to path with header pairs hdr (see Request)
// per code, in order, and fails the test unless each gets its code. It
// returns the last response.
func (c *Caddy) ExpectCodes(t *testing.T, path string, hdr []string, codes ...int) Response {
	t.Helper()
	var r Response
	for i, code := range codes {
		r = c.Get(t, path, hdr...)
		ExpectCode(t, r, code, fmt.Sprintf("request %d of %v to %s %v", i+1, codes, path, hdr))
	}
	return r
}

// ExpectHeader fails the test (and goes on) unless r's header name is want.
func ExpectHeader(t *testing.T, r Response, name, want string) {
	t.Helper()
	if got := r.Header.Get(name); got != want {
		t.Errorf("%s %q, want %q", name, got, want)
	}
}

// RetryAfter returns r's Retry-After, which must be a number of seconds.
func RetryAfter(t *testing.T, r Response) int {
	t.Helper()
	n, err := strconv.Atoi(r.Header.Get("Retry-After"))
	if err != nil {
		t.Fatalf("Retry-After %q: %v", r.Header.Get("Retry-After"), err)
	}
	return n
}

// ExpectRetryAfter fails the test unless r's Retry-After is within
// [lo, hi] seconds.
func ExpectRetryAfter(t *testing.T, r Response, lo, hi int) {
	t.Helper()
	if n := RetryAfter(t, r); n < lo || n > hi {
		t.Fatalf("Retry-After %d, want %d..%d", n, lo, hi)
	}
}

// Remaining returns X-RateLimit-Remaining as a number (-1 if absent).
func Remaining(t *testing.T, r Response) int {
	t.Helper()
	v := r.Header.Get("X-RateLimit-Remaining")
	if v == "" {
		return -1
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("X-RateLimit-Remaining %q", v)
	}
	return n
}

// WaitFor polls cond every 20ms until it is true or timeout passes, and
// reports whether it became true.
func WaitFor(timeout time.Duration, cond func() bool) bool {
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

// Scrape GETs the admin endpoint's /metrics and parses it. It fails the
// test unless the answer is 200 and well-formed exposition text (a family
// given twice, as a duplicate registration would, does not parse).
func (c *Caddy) Scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequest("GET", c.AdminURL("/metrics"), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := Send(NoKeepAlive, req)
	if r.Err != nil || r.Code != 200 {
		t.Fatalf("GET /metrics: %d %v %s", r.Code, r.Err, r.Body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(r.Body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v\n%s", err, r.Body)
	}
	return fams
}

// Sample finds the series of family name whose labels include want
// (name=value pairs).
func Sample(fams map[string]*dto.MetricFamily, name string, want ...string) (*dto.Metric, bool) {
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

// Value is the value of a counter or gauge series (-1 when absent).
func Value(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	m, ok := Sample(fams, name, labels...)
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
