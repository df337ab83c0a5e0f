package ratelimit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// caddy-ext's key variables, as its own parseVar test has them, and the
// key each becomes here.
func TestCaddyExtKeys(t *testing.T) {
	for _, c := range []struct {
		in, key, err string
		v4, v6       int
	}{
		{in: "{path.id}", key: "{http.request.uri.path.id}"},
		{in: "{query.id}", key: "{http.request.uri.query.id}"},
		{in: "{header.id}", key: "{http.request.header.id}"},
		{in: "{cookie.id}", key: "{http.request.cookie.id}"},
		{in: "{remote.host}", key: "{http.request.remote.host}"},
		{in: "{remote.port}", key: "{http.request.remote.port}"},
		{in: "{remote.ip}", key: "{http.request.client_ip}"},
		{in: "{http.request.uri.path.id}", key: "{http.request.uri.path.id}"},
		{in: "{remote.host_prefix.24}", key: "{http.request.remote.host}", v4: 24, v6: 24},
		{in: "{remote.ip_prefix.64}", key: "{http.request.client_ip}", v4: 32, v6: 64},
		{in: "{unknown.id}", err: `unrecognized key variable "{unknown.id}"`},
		{in: "{unknown}", err: `invalid key variable "{unknown}"`},
		{in: "static", err: `invalid key variable "static"`},
		{in: "{remote.mac}", err: `unrecognized key variable "{remote.mac}"`},
		{in: "{remote.port_prefix.8}", err: "bits from 1 to 128"},
		{in: "{remote.host_prefix.0}", err: "bits from 1 to 128"},
		{in: "{remote.host_prefix.129}", err: "bits from 1 to 128"},
	} {
		z := new(Zone)
		err := z.setCaddyExtKey(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want one saying %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || z.Key != c.key || z.IPv4Prefix != c.v4 || z.IPv6Prefix != c.v6 {
			t.Errorf("%s: key %q, prefixes %d/%d, error %v; want %q, %d/%d", c.in, z.Key, z.IPv4Prefix, z.IPv6Prefix, err, c.key, c.v4, c.v6)
		}
	}
}

// caddy-ext's README example, in its JSON: two requests a minute per id;
// the third is rejected, another id is not, and a request without an id is
// not limited.
func TestCaddyExtJSON(t *testing.T) {
	const config = `{"key":"{query.id}","rate":"2r/m","zone_size":100,"reject_status":503}`
	dec := json.NewDecoder(bytes.NewReader([]byte(config)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(new(Handler)); err != nil {
		t.Fatalf("strict decoding: %v", err)
	}
	h := provision(t, config, newClock())
	if len(h.Zones) != 1 || h.Zones[0].Name != "default" || h.Zones[0].Algorithm != "sliding_window" ||
		h.MaxKeys != 100 || h.Status != 503 || h.Key != "" || h.Rate != "" {
		t.Fatalf("converted to zones %+v, max_keys %d, status %d", h.Zones, h.MaxKeys, h.Status)
	}
	query := func(q string) reqOpt { return func(r *http.Request) { r.URL.RawQuery = q } }
	for i, want := range []int{200, 200, 503} {
		if res := serve(h, newReq("192.0.2.1:1", query("id=1"))); res.code != want {
			t.Fatalf("id=1, request %d: %d, want %d", i+1, res.code, want)
		}
	}
	if res := serve(h, newReq("192.0.2.1:1", query("id=2"))); res.code != 200 {
		t.Fatalf("id=2: %d", res.code)
	}
	for i := 0; i < 5; i++ {
		if res := serve(h, newReq("192.0.2.1:1")); res.code != 200 {
			t.Fatalf("no id, request %d: %d", i+1, res.code)
		}
	}
}

func TestCaddyExtJSONRefused(t *testing.T) {
	for _, c := range []struct{ config, want string }{
		{`{"key":"{query.id}"}`, "rate (from RussellLuo/caddy-ext) is missing"},
		{`{"rate":"1r/s"}`, "key (from RussellLuo/caddy-ext) is missing"},
		{`{"key":"{query.id}","rate":"1r/h"}`, `must be <n>r/s or <n>r/m, got "1r/h"`},
		{`{"key":"{query.id}","rate":"0r/s"}`, "must allow at least one request"},
		{`{"key":"{query.id}","rate":"99999999999999999999r/s"}`, "allows at most 1125899906842624 requests"},
		{`{"key":"{query.id}","rate":"1125899906842625r/m"}`, "allows at most 1125899906842624 requests"},
		{`{"key":"{query.id}","rate":"1r/s","zone_size":-1}`, "zone_size (from RussellLuo/caddy-ext) must be positive"},
		{`{"key":"{query.id}","rate":"1r/s","reject_status":200}`, "reject_status (from RussellLuo/caddy-ext): status must be a 4xx or 5xx code"},
		{`{"key":"{nope.id}","rate":"1r/s"}`, "unrecognized key variable"},
		{`{"key":"{query.id}","rate":"1r/s","zones":[{"name":"a","key":"k","limits":[{"events":1,"window":"1m"}]}]}`, "cannot be combined with zones"},
		{`{"key":"{query.id}","rate":"1r/s","rate_limits":{"a":{"key":"k","window":"1m","max_events":1}}}`, "cannot be combined with zones"},
	} {
		expectProvisionErr(t, c.config, c.want)
	}
}

// A zone_size or reject_status of 0 means its default, as in caddy-ext:
// max_keys' and 429; a positive one is taken.
func TestCaddyExtZeroMeansDefault(t *testing.T) {
	for _, c := range []struct{ line, want, not string }{
		{"rate_limit {query.id} 2r/m 0 0", `"limits":[{"events":2,"window":60000000000}]`, `"status"`},
		{"rate_limit {query.id} 2r/m 0", `"name":"default"`, `"max_keys"`},
		{"rate_limit {query.id} 2r/m 7 0", `"max_keys":7`, `"status"`},
		{"rate_limit {query.id} 2r/m 0 503", `"status":503`, `"max_keys"`},
	} {
		indented, _, err := adaptCaddyfile(t, ":8080 {\n\t"+c.line+"\n}\n")
		var compact bytes.Buffer
		if err == nil {
			err = json.Compact(&compact, []byte(indented))
		}
		if out := compact.String(); err != nil || !strings.Contains(out, c.want) || strings.Contains(out, c.not) {
			t.Errorf("%q: adapted to %s (error %v), want %s and no %s", c.line, compact.String(), err, c.want, c.not)
		}
	}
}

// The one-line form's errors name the directive's line.
func TestCaddyExtCaddyfileErrors(t *testing.T) {
	for _, c := range []struct{ line, want string }{
		{"rate_limit {query.id}", `unexpected argument "{http.request.uri.query.id}"`},
		{"rate_limit {query.id} 1r/s 10 429 x", "unexpected arguments"},
		{"rate_limit {query.id} 1r/s ten", `zone_size must be an integer, got "ten"`},
		{"rate_limit {query.id} 1r/s 10 too-many", `reject_status must be an integer, got "too-many"`},
		{"rate_limit {query.id} 1r/s {\n\t\tzone z\n\t}", "takes no block"},
		{"rate_limit {query.id} 1r/d", `got "1r/d"`},
		{"rate_limit {query.id} 1r/s -1", "zone_size (from RussellLuo/caddy-ext) must be positive"},
		{"rate_limit {body.name} 1r/s", `"{body.name}" needs caddy-ext's requestbodyvar handler`},
		{"rate_limit {path.} 1r/s", "it names no uri.path"},
		{"rate_limit {header.} 1r/s", "it names no header"},
		{"rate_limit {cookie.} 1r/s", "it names no cookie"},
		{"rate_limit {query.} 1r/s", "it names no uri.query"},
	} {
		_, _, err := adaptCaddyfile(t, ":8080 {\n\t"+c.line+"\n}\n")
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "Caddyfile:2") {
			t.Errorf("%q: error %v, want one at Caddyfile:2 saying %q", c.line, err, c.want)
		}
	}
}

// The one-line form's zone does not take a name a zone block took before
// it, and a zone block after it may not take the name it was given: the
// user could not rename a zone they did not name.
func TestCaddyExtNamesAvoidZoneBlocks(t *testing.T) {
	const block = "%s {\n\trate_limit {\n\t\tzone default {\n\t\t\tkey {http.request.remote.host}\n\t\t\tlimit 100 1m\n\t\t}\n\t}\n\trespond ok\n}\n"
	const oneLine = "%s {\n\trate_limit {query.id} 2r/m\n\trespond ok\n}\n"
	out, _, err := adaptCaddyfile(t, fmt.Sprintf(block, ":8081")+fmt.Sprintf(oneLine, ":8082"))
	if err != nil || !strings.Contains(out, `"name": "default_2"`) {
		t.Fatalf("a zone block named default, then the one-line form: %v\n%s", err, out)
	}
	_, _, err = adaptCaddyfile(t, fmt.Sprintf(oneLine, ":8082")+fmt.Sprintf(block, ":8081"))
	if err == nil || !strings.Contains(err.Error(), `zone name "default" is the name given to the zone of the one-line rate_limit at line 2`) ||
		!strings.Contains(err.Error(), "Caddyfile:7") {
		t.Fatalf("the one-line form, then a zone block named default: %v", err)
	}
}
