package ratelimit

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

// observe replaces h's logger with one that records entries at level and
// above.
func observe(h *Handler, level zapcore.Level) *observer.ObservedLogs {
	core, logs := observer.New(level)
	h.rt.logger = zap.New(core)
	return logs
}

// Denials are logged at debug without the key; with log_keys at info, with
// the key and the client's address, as mholt/caddy-ratelimit logs them with
// log_key (message "rate limit exceeded"; fields zone, wait, remote_ip,
// key).
func TestLogsDenials(t *testing.T) {
	for _, logKeys := range []bool{false, true} {
		cfg := `{"zones":[{"name":"z","key":"{http.request.remote.host}","limits":[{"events":1,"window":"1m"}]}]}`
		if logKeys {
			cfg = `{"log_keys":true,` + cfg[1:]
		}
		h := provision(t, cfg, newClock())
		info := observe(h, zapcore.InfoLevel)
		for i := 0; i < 5; i++ {
			serve(h, newReq("192.0.2.77:1")) // the first is admitted
		}
		want := 0
		if logKeys {
			want = 4
		}
		if n := info.Len(); n != want {
			t.Errorf("log_keys %v: %d lines at info or above for 4 denials, want %d", logKeys, n, want)
		}
		for _, e := range info.All() {
			m := e.ContextMap()
			if e.Message != "rate limit exceeded" || e.Level != zapcore.InfoLevel ||
				m["zone"] != "z" || m["key"] != "192.0.2.77" || m["remote_ip"] != "192.0.2.77" || m["wait"] != time.Minute {
				t.Errorf("log_keys: denial logged as %s %q %v", e.Level, e.Message, m)
			}
		}
		debug := observe(h, zapcore.DebugLevel)
		serve(h, newReq("192.0.2.77:1"))
		entries := debug.FilterMessage("rate limit exceeded").All()
		if len(entries) != 1 {
			t.Fatalf("log_keys %v: %d debug lines for one denial, want 1", logKeys, len(entries))
		}
		_, hasKey := entries[0].ContextMap()["key"]
		if hasKey != logKeys || strings.Contains(entryText(entries[0]), "192.0.2.77") != logKeys {
			t.Errorf("log_keys %v: key in the log line: %v (%v)", logKeys, hasKey, entries[0].ContextMap())
		}
	}
}

// With log_keys, a dry run logs what it would have denied at info too.
func TestLogsDryRunDenialsWithLogKeys(t *testing.T) {
	h := provision(t, `{"log_keys":true,"dry_run":true,"zones":[{"name":"z","key":"{http.request.header.X-User}",
		"limits":[{"events":1,"window":"1m"}]}]}`, newClock())
	info := observe(h, zapcore.InfoLevel)
	for i := 0; i < 3; i++ {
		serve(h, newReq("192.0.2.77:1", header("X-User", "ann")))
	}
	entries := info.FilterMessage("rate limit exceeded (dry run: not rejected)").All()
	if len(entries) != 2 || entries[0].ContextMap()["key"] != "ann" {
		t.Fatalf("%d info lines for 2 dry-run denials (want 2, with key ann): %v", len(entries), info.All())
	}
}

// A Redis outage writes a warn line at most once per 10 s per zone, however
// many requests fail, and no key unless log_keys.
func TestLogsStoreErrorsRateLimited(t *testing.T) {
	srv := redistest.Start(t)
	h := provision(t, redisConfig(srv.Addr, 100, ""), nil)
	logs := observe(h, zapcore.WarnLevel)
	srv.Stop()
	for i := 0; i < 50; i++ {
		serve(h, newReq("192.0.2.77:1"))
	}
	warns := logs.FilterMessage("rate limit store failed").All()
	if len(warns) != 1 {
		t.Fatalf("%d warn lines for 50 failing requests, want 1", len(warns))
	}
	if strings.Contains(entryText(warns[0]), "192.0.2.77") {
		t.Errorf("key logged without log_keys: %v", warns[0].ContextMap())
	}
}

func entryText(e observer.LoggedEntry) string {
	var b strings.Builder
	b.WriteString(e.Message)
	for k, v := range e.ContextMap() {
		b.WriteString(" " + k + "=")
		b.WriteString(strings.TrimSpace(strings.ReplaceAll(fmtAny(v), "\n", " ")))
	}
	return b.String()
}

func fmtAny(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	if e, ok := v.(error); ok {
		return e.Error()
	}
	return ""
}

// Windows that make a limit hold less than it reads, and request
// placeholders Caddy never sets, are logged at warn, once each.
func TestLintWarnings(t *testing.T) {
	h := provision(t, `{"zones":[{"name":"z","key":"k","limits":[{"events":1,"window":"1m"}]}]}`, newClock())
	warn := observe(h, zapcore.WarnLevel)
	sec := caddy.Duration(time.Second)
	h.lintWindows(&Zone{Name: "c", Algorithm: algorithms.Concurrency, Limits: []Limit{{Events: 1, Window: caddy.Duration(time.Millisecond)}}})
	h.lintWindows(&Zone{Name: "c1s", Algorithm: algorithms.Concurrency, Limits: []Limit{{Events: 1, Window: sec}}})
	h.SyncInterval = sec
	h.lintWindows(&Zone{Name: "s", Algorithm: algorithms.FixedWindow, Limits: []Limit{{Events: 5, Window: sec}, {Events: 50, Window: 60 * sec}}})
	h.lintPlaceholders(&Zone{Name: "p", Key: "{http.request.haeder.X-Key}", Cost: "{http.request.header.X-Cost}",
		Limits: []Limit{{EventsPlaceholder: "{http.request.header.X Plan}"}}})
	var got []string
	for _, e := range warn.All() {
		m := e.ContextMap()
		if w, ok := m["window"]; ok {
			got = append(got, fmt.Sprint(m["zone"], " ", w))
		} else {
			got = append(got, fmt.Sprint(m["zone"], " ", m["option"], " ", m["placeholder"]))
		}
	}
	want := []string{"c 1ms", "s 1s", "p key {http.request.haeder.X-Key}", "p limit {http.request.header.X Plan}"}
	if !slices.Equal(got, want) {
		t.Errorf("warnings %q, want %q", got, want)
	}
}
