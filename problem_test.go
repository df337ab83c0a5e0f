package ratelimit

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// refuse serves requests of one client until one is refused, and returns
// the recorded refusal.
func refuse(t *testing.T, h *Handler, opts ...reqOpt) *httptest.ResponseRecorder {
	t.Helper()
	next := func(w http.ResponseWriter, _ *http.Request) error {
		w.WriteHeader(200)
		return nil
	}
	for range 10 {
		w := httptest.NewRecorder()
		if err := h.ServeHTTP(w, newReq("192.0.2.1:1", opts...), caddyhttp.HandlerFunc(next)); err != nil {
			t.Fatal(err)
		}
		if w.Code != 200 {
			return w
		}
	}
	t.Fatal("never refused")
	return nil
}

// expectProblem fails the test unless w is a problem+json rejection with
// status and the members of quota-exceeded naming zone.
func expectProblem(t *testing.T, w *httptest.ResponseRecorder, status int, zone string) {
	t.Helper()
	if w.Code != status {
		t.Fatalf("code %d, want %d", w.Code, status)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q", ct)
	}
	body := w.Body.Bytes()
	if cl := w.Header().Get("Content-Length"); cl != strconv.Itoa(len(body)) {
		t.Errorf("Content-Length %q, body of %d bytes", cl, len(body))
	}
	var p map[string]any
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.UseNumber()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	retry := w.Header().Get("Retry-After")
	want := map[string]any{
		"type":              "https://iana.org/assignments/http-problem-types#quota-exceeded",
		"title":             "Request cannot be satisfied as assigned quota has been exceeded",
		"status":            json.Number(strconv.Itoa(status)),
		"detail":            "Rate limit exceeded in zone " + zone + ": retry after " + retry + "s.",
		"violated-policies": []any{zone},
	}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("problem\n got %v\nwant %v", p, want)
	}
	// The policy named is the one in RateLimit-Policy.
	if pol := w.Header().Get("RateLimit-Policy"); !strings.Contains(pol, `"`+zone+`";`) {
		t.Errorf("RateLimit-Policy %q does not name %q", pol, zone)
	}
}

func TestProblemDetails(t *testing.T) {
	clock := newClock()
	h := provision(t, `{"problem_details":true,"zones":[
		{"name":"site","key":"k","limits":[{"events":5,"window":"1m"}]},
		{"name":"api","key":"{http.request.remote.host}","limits":[{"events":2,"window":"1m"}]}]}`, clock)
	w := refuse(t, h)
	expectProblem(t, w, 429, "api")
	if w.Header().Get("Retry-After") != "60" {
		t.Errorf("Retry-After %q, want 60", w.Header().Get("Retry-After"))
	}
	clock.Advance(45 * time.Second)
	expectProblem(t, refuse(t, h), 429, "api") // another detail: 15s
}

func TestProblemDetailsStatusAndEmptyKey(t *testing.T) {
	h := provision(t, `{"problem_details":true,"status":503,"zones":[
		{"name":"tenant","key":"{http.request.header.X-Org}","empty_key":"deny","limits":[{"events":1,"window":"10s"}]}]}`, newClock())
	expectProblem(t, refuse(t, h), 503, "tenant")
}

func TestProblemDetailsOffByDefault(t *testing.T) {
	h := provision(t, `{"zones":[{"name":"api","key":"k","limits":[{"events":1,"window":"1m"}]}]}`, newClock())
	w := refuse(t, h)
	if w.Code != 429 || w.Body.Len() != 0 || w.Header().Get("Content-Type") != "" {
		t.Fatalf("code %d, body %q, Content-Type %q: want 429 with an empty body", w.Code, w.Body, w.Header().Get("Content-Type"))
	}
}

// A rejection handed to handle_errors routes is theirs to render.
func TestProblemDetailsNotForErrorRoutes(t *testing.T) {
	h := provision(t, `{"problem_details":true,"zones":[{"name":"api","key":"k","limits":[{"events":1,"window":"1m"}]}]}`, newClock())
	h.rt.errorRoutes = errorRoutesYes
	serve(h, newReq("192.0.2.1:1"))
	w := httptest.NewRecorder()
	err := h.ServeHTTP(w, newReq("192.0.2.1:1"), caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil }))
	if errorStatus(err) != 429 || w.Body.Len() != 0 || w.Header().Get("Content-Type") != "" {
		t.Fatalf("err %v, body %q, Content-Type %q: want a 429 error and nothing written", err, w.Body, w.Header().Get("Content-Type"))
	}
}

// Without problem_details nothing is prepared; with it, a rejection
// allocates its body and Content-Length only.
func TestProblemDetailsAllocations(t *testing.T) {
	off := provision(t, `{"zones":[{"name":"api","key":"k","limits":[{"events":1,"window":"1m"}]}]}`, newClock())
	on := provision(t, `{"problem_details":true,"zones":[{"name":"api2","key":"k","limits":[{"events":1,"window":"1m"}]}]}`, newClock())
	w := &discardWriter{h: make(http.Header)}
	z := off.rt.zones[0]
	if z.problem.head != nil {
		t.Fatal("a problem body prepared without problem_details")
	}
	d := on.rt.zones[0]
	if n := testing.AllocsPerRun(100, func() {
		clear(w.h)
		_ = d.writeProblem(w, 429, 60)
	}); n > 3 {
		t.Errorf("writeProblem: %v allocations, want at most 3 (body, Content-Length and its value)", n)
	}
}

func TestProblemDetailsCaddyfile(t *testing.T) {
	out, _, err := adaptCaddyfile(t, ":8080 {\n\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t}\n\t\tproblem_details\n\t}\n\trespond \"ok\"\n}\n")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `"problem_details": true`) {
		t.Errorf("adapted JSON without problem_details: %s", out)
	}
	_, _, err = adaptCaddyfile(t, ":8080 {\n\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t}\n\t\tproblem_details yes\n\t}\n\trespond \"ok\"\n}\n")
	if err == nil || !strings.Contains(err.Error(), "Caddyfile:7") || !strings.Contains(err.Error(), "problem_details takes no arguments") {
		t.Errorf("problem_details yes: %v", err)
	}
}
