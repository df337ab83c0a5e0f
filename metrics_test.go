package ratelimit

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
	"github.com/zonelimit/caddy-ratelimit/redisstore"
)

// metricValue returns the value of the series name{labels} in reg, and
// whether it exists. labels are name=value pairs.
func metricValue(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for _, l := range labels {
				k, v, _ := strings.Cut(l, "=")
				if have[k] != v {
					continue next
				}
			}
			return value(m), true
		}
	}
	return 0, false
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

// provisionCtx provisions handlers in one context (one config load) and
// returns them and its metrics registry.
func provisionCtx(t *testing.T, configs ...string) ([]*Handler, *prometheus.Registry) {
	t.Helper()
	ctx := testContext(t)
	return provisionLoad(t, ctx, nil, configs...), ctx.GetMetricsRegistry()
}

func TestMetrics(t *testing.T) {
	// A second handler of the same config load shares the collectors (no
	// duplicate registration) and the zone of the same name: its keys
	// are reported once.
	hs, reg := provisionCtx(t,
		`{"zones":[{"name":"m","key":"{http.request.remote.host}","limits":[{"events":2,"window":"1m"}]}]}`,
		`{"dry_run":true,"zones":[{"name":"m","key":"{http.request.remote.host}","limits":[{"events":2,"window":"1m"}]}]}`)
	h, h2 := hs[0], hs[1]
	for i := 0; i < 3; i++ {
		serve(h, newReq("192.0.2.1:1"))
	}
	serve(h, newReq("192.0.2.2:1"))
	serve(h2, newReq("192.0.2.2:1"))
	serve(h2, newReq("192.0.2.2:1"))

	checks := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"caddy_http_rate_limit_requests_total", []string{"zone=m", "result=allowed"}, 4},
		{"caddy_http_rate_limit_requests_total", []string{"zone=m", "result=denied"}, 1},
		{"caddy_http_rate_limit_requests_total", []string{"zone=m", "result=dry_run"}, 1},
		{"caddy_http_rate_limit_decision_seconds", []string{"store=memory"}, 6},
		{"caddy_http_rate_limit_keys", []string{"zone=m"}, 2}, // one store, counted once
	}
	for _, c := range checks {
		got, ok := metricValue(t, reg, c.name, c.labels...)
		if !ok || got != c.want {
			t.Errorf("%s%v = %v (found %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	if _, ok := metricValue(t, reg, "caddy_http_rate_limit_breaker_open"); ok {
		t.Error("breaker_open reported for a memory store")
	}
	// Once the zones are gone: nothing.
	h.Cleanup()
	h2.Cleanup()
	if _, ok := metricValue(t, reg, "caddy_http_rate_limit_keys"); ok {
		t.Error("keys still reported after Cleanup")
	}
}

func TestMetricsDryRunAndRedis(t *testing.T) {
	srv := redistest.Start(t)
	hs, reg := provisionCtx(t, `{"dry_run":true,"store":"redis","redis":{"addresses":["`+srv.Addr+`"]},
		"zones":[{"name":"r","key":"k","limits":[{"events":1,"window":"1m"}]}]}`)
	h := hs[0]
	serve(h, newReq("192.0.2.1:1"))
	serve(h, newReq("192.0.2.1:1"))
	if v, _ := metricValue(t, reg, "caddy_http_rate_limit_requests_total", "zone=r", "result=dry_run"); v != 1 {
		t.Errorf("dry_run = %v, want 1", v)
	}
	if v, _ := metricValue(t, reg, "caddy_http_rate_limit_breaker_open", "zone=r"); v != 0 {
		t.Errorf("breaker_open = %v, want 0", v)
	}
	srv.Stop()
	for i := 0; i < redisstore.BreakerFailures+2; i++ {
		if res := serve(h, newReq("192.0.2.1:1")); res.code != 200 {
			t.Fatalf("on_error open: %d", res.code)
		}
	}
	want := map[string]float64{"result=error": redisstore.BreakerFailures + 2}
	for l, w := range want {
		if v, _ := metricValue(t, reg, "caddy_http_rate_limit_requests_total", "zone=r", l); v != w {
			t.Errorf("%s = %v, want %v", l, v, w)
		}
	}
	if v, _ := metricValue(t, reg, "caddy_http_rate_limit_store_errors_total", "zone=r"); v != redisstore.BreakerFailures {
		t.Errorf("store_errors_total = %v, want %d (no calls while the breaker is open)", v, redisstore.BreakerFailures)
	}
	if v, _ := metricValue(t, reg, "caddy_http_rate_limit_breaker_open", "zone=r"); v != 1 {
		t.Errorf("breaker_open = %v, want 1", v)
	}
	if v, _ := metricValue(t, reg, "caddy_http_rate_limit_decision_seconds", "store=redis"); v != 2+redisstore.BreakerFailures {
		t.Errorf("decisions observed = %v, want %d", v, 2+redisstore.BreakerFailures)
	}
}

// With on_error local, a request that Redis failed to decide is counted
// once, as what the memory fallback decided: requests_total sums to the
// requests (store_errors_total and breaker_open tell of the failure).
func TestMetricsLocalFallbackCountedOnce(t *testing.T) {
	srv := redistest.Start(t)
	hs, reg := provisionCtx(t, `{"store":"redis","on_error":"local","redis":{"addresses":["`+srv.Addr+`"]},
		"zones":[{"name":"l","key":"k","limits":[{"events":3,"window":"1h"}]}]}`)
	h := hs[0]
	srv.Stop()
	const requests = 5
	codes := map[int]int{}
	for range requests {
		codes[serve(h, newReq("192.0.2.1:1")).code]++
	}
	if codes[200] != 3 || codes[429] != 2 {
		t.Fatalf("statuses %v, want 3 admitted and 2 denied by the fallback", codes)
	}
	for result, want := range map[string]float64{"allowed": 3, "denied": 2, "error": 0} {
		if v, _ := metricValue(t, reg, "caddy_http_rate_limit_requests_total", "zone=l", "result="+result); v != want {
			t.Errorf("requests_total{result=%s} = %v, want %v", result, v, want)
		}
	}
	if v, _ := metricValue(t, reg, "caddy_http_rate_limit_store_errors_total", "zone=l"); v == 0 {
		t.Error("store_errors_total = 0 with Redis stopped")
	}
}

// The counters keep counting across a reload: the new config's registry
// reports what was counted under the previous one, as long as a config
// with the handler stays loaded.
func TestMetricsAcrossReload(t *testing.T) {
	const cfg = `{"zones":[{"name":"m_reload","key":"k","limits":[{"events":1,"window":"1h"}]}]}`
	hs1, reg1 := provisionCtx(t, cfg)
	serve(hs1[0], newReq("192.0.2.1:1"))
	serve(hs1[0], newReq("192.0.2.1:1"))
	if v, _ := metricValue(t, reg1, "caddy_http_rate_limit_requests_total", "zone=m_reload", "result=denied"); v != 1 {
		t.Fatalf("denied = %v before the reload, want 1", v)
	}
	// The reload: the new config is provisioned, then the old one
	// cleaned up.
	hs2, reg2 := provisionCtx(t, cfg)
	hs1[0].Cleanup()
	serve(hs2[0], newReq("192.0.2.1:1"))
	for result, want := range map[string]float64{"denied": 2, "allowed": 1} {
		if v, _ := metricValue(t, reg2, "caddy_http_rate_limit_requests_total", "zone=m_reload", "result="+result); v != want {
			t.Errorf("%s = %v after the reload, want %v", result, v, want)
		}
	}
	if v, _ := metricValue(t, reg2, "caddy_http_rate_limit_decision_seconds", "store=memory"); v != 3 {
		t.Errorf("decisions observed = %v after the reload, want 3", v)
	}
}

// A reload that drops a zone drops its series; a zone that stays keeps
// counting, also when a handler is cleaned up twice.
func TestMetricsDropRemovedZones(t *testing.T) {
	hs1, _ := provisionCtx(t, `{"zones":[{"name":"m_gone","key":"k","limits":[{"events":1,"window":"1h"}]},
		{"name":"m_kept","key":"k","limits":[{"events":5,"window":"1h"}]}]}`)
	serve(hs1[0], newReq("192.0.2.1:1"))
	hs2, reg2 := provisionCtx(t, `{"zones":[{"name":"m_kept","key":"k","limits":[{"events":5,"window":"1h"}]}]}`)
	hs1[0].Cleanup()
	hs1[0].Cleanup()
	serve(hs2[0], newReq("192.0.2.1:1"))
	for _, name := range []string{"caddy_http_rate_limit_requests_total", "caddy_http_rate_limit_store_errors_total"} {
		if _, ok := metricValue(t, reg2, name, "zone=m_gone"); ok {
			t.Errorf("%s still has a series of zone m_gone, which no config names", name)
		}
	}
	if v, _ := metricValue(t, reg2, "caddy_http_rate_limit_requests_total", "zone=m_kept", "result=allowed"); v != 2 {
		t.Errorf("m_kept allowed = %v, want 2 (counted across the reload)", v)
	}
}
