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
