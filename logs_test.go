package ratelimit

import (
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

// observe replaces h's logger with one that records entries at level and
// above.
func observe(h *Handler, level zapcore.Level) *observer.ObservedLogs {
	core, logs := observer.New(level)
	h.rt.logger = zap.New(core)
	return logs
}

// Denials are logged at debug only, and keys appear only with log_keys.
func TestLogsDenials(t *testing.T) {
	for _, logKeys := range []bool{false, true} {
		cfg := `{"zones":[{"name":"z","key":"{http.request.remote.host}","limits":[{"events":1,"window":"1m"}]}]}`
		if logKeys {
			cfg = `{"log_keys":true,` + cfg[1:]
		}
		h := provision(t, cfg, newFakeClock())
		info := observe(h, zapcore.InfoLevel)
		for i := 0; i < 5; i++ {
			serve(h, newReq("192.0.2.77:1"))
		}
		if n := info.Len(); n != 0 {
			t.Errorf("log_keys %v: %d lines at info or above for denials, want 0", logKeys, n)
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
