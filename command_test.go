package ratelimit

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The rate-limit command pointed at a server that is not Caddy's admin
// endpoint (a site's port) says so, not "invalid character".
func TestCommandNotAdminAPI(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	api := &adminClient{addr: strings.TrimPrefix(srv.URL, "http://")}
	var out []adminZone
	err := api.do(http.MethodGet, "/rate_limit/zones", nil, &out)
	if err == nil || !strings.Contains(err.Error(), "did not answer GET /rate_limit/zones as Caddy's admin API") ||
		!strings.Contains(err.Error(), "is --address the admin endpoint?") {
		t.Fatalf("err %v, want one that says the address is not the admin API", err)
	}
}

// shortDuration writes what `caddy rate-limit get` prints after "whole
// again in": no zero units, whole seconds from a second up, whole days as
// days (as the window beside it), anything else as it came.
func TestShortDuration(t *testing.T) {
	for in, want := range map[string]string{
		"500ms":        "500ms",
		"1.4s":         "1s",
		"1m0s":         "1m",
		"1h0m0s":       "1h",
		"1h30m0s":      "1h30m",
		"23h59m59.6s":  "1d",
		"24h0m0s":      "1d",
		"48h0m0s":      "2d",
		"25h0m0s":      "25h",
		"not a length": "not a length",
	} {
		if got := shortDuration(in); got != want {
			t.Errorf("shortDuration(%q) = %q, want %q", in, got, want)
		}
	}
}
