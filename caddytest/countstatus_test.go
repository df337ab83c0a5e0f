package integration

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"

	"github.com/zonelimit/caddy-ratelimit/internal/caddytesting"
)

// loadCountStatus loads a site on the HTTP port whose zone counts only the
// responses of status, events a minute by X-Client, with problem details,
// in front of routes.
func loadCountStatus(t *testing.T, zone string, events, status int, routes string) {
	t.Helper()
	live.LoadSites(t, fmt.Sprintf(`
http:// {
	rate_limit {
		zone %s {
			key {http.request.header.X-Client}
			limit %d 1m
			count_status %d
		}
		problem_details
	}%s
}`, zone, events, status, routes))
}

// A login guard through a real Caddy: only the failed logins (401) count,
// and the refusal has a problem details body.
func TestCountStatusLogin(t *testing.T) {
	loadCountStatus(t, "it_cs_login", 2, 401, `
	@right header X-Password secret
	respond @right "welcome" 200
	respond "wrong password" 401`)
	for i := range 4 {
		r := live.Get(t, "/login", "X-Client", "a", "X-Password", "secret")
		caddytesting.ExpectCode(t, r, 200, "right password "+strconv.Itoa(i+1))
		// The provisional count, given back after the 200.
		if n := caddytesting.Remaining(t, r); n != 1 {
			t.Fatalf("right password %d: remaining %d, want 1", i+1, n)
		}
	}
	for i := range 2 {
		r := live.Get(t, "/login", "X-Client", "a", "X-Password", "guess")
		caddytesting.ExpectCode(t, r, 401, "wrong password "+strconv.Itoa(i+1))
		if n := caddytesting.Remaining(t, r); n != 1-i {
			t.Fatalf("wrong password %d: remaining %d, want %d", i+1, n, 1-i)
		}
	}
	// Locked out: the right password too, refused before the respond.
	r := live.Get(t, "/login", "X-Client", "a", "X-Password", "secret")
	caddytesting.ExpectCode(t, r, 429, "right password, locked out")
	caddytesting.ExpectRetryAfter(t, r, 1, 60)
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q", ct)
	}
	if cl := r.Header.Get("Content-Length"); cl != strconv.Itoa(len(r.Body)) {
		t.Errorf("Content-Length %q, body of %d bytes", cl, len(r.Body))
	}
	var p struct {
		Type     string   `json:"type"`
		Title    string   `json:"title"`
		Status   int      `json:"status"`
		Detail   string   `json:"detail"`
		Violated []string `json:"violated-policies"`
	}
	if err := json.Unmarshal([]byte(r.Body), &p); err != nil {
		t.Fatalf("body %q: %v", r.Body, err)
	}
	if p.Type != "https://iana.org/assignments/http-problem-types#quota-exceeded" || p.Status != 429 ||
		p.Title == "" || p.Detail == "" || len(p.Violated) != 1 || p.Violated[0] != "it_cs_login" {
		t.Errorf("problem %+v", p)
	}

	// Another client is not affected.
	caddytesting.ExpectCode(t, live.Get(t, "/login", "X-Client", "b", "X-Password", "secret"), 200, "other client")
}

// A failure returned as an error (the error directive) counts as its
// status; the refusal goes to handle_errors, which renders it: no problem
// body then.
func TestCountStatusErrorRoutes(t *testing.T) {
	loadCountStatus(t, "it_cs_errors", 1, 403, `
	@wrong not header X-Password secret
	error @wrong "forbidden" 403
	respond "welcome"
	handle_errors {
		respond "{err.status_code}"
	}`)
	for i := range 3 {
		r := live.Get(t, "/", "X-Client", "a", "X-Password", "secret")
		caddytesting.ExpectCode(t, r, 200, "right password "+strconv.Itoa(i+1))
	}
	r := live.Get(t, "/", "X-Client", "a")
	caddytesting.ExpectCode(t, r, 403, "wrong password")
	r = live.Get(t, "/", "X-Client", "a", "X-Password", "secret")
	caddytesting.ExpectCode(t, r, 429, "locked out")
	if r.Body != "429" || r.Header.Get("Content-Type") == "application/problem+json" {
		t.Errorf("refusal rendered by handle_errors: body %q, Content-Type %q", r.Body, r.Header.Get("Content-Type"))
	}
}
