package keyresolver

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func TestNewTemplateBounds(t *testing.T) {
	for _, tc := range []struct {
		v4, v6 int
		ok     bool
	}{
		{0, 0, true}, {1, 1, true}, {32, 128, true}, {33, 128, false}, {32, 129, false},
		{-1, 64, false}, {24, -5, false},
	} {
		_, err := NewTemplate("{http.request.remote.host}", tc.v4, tc.v6)
		if (err == nil) != tc.ok {
			t.Errorf("NewTemplate(v4=%d, v6=%d): err = %v, want ok=%v", tc.v4, tc.v6, err, tc.ok)
		}
	}
}

func newRequest(remote string, hdr map[string]string) *http.Request {
	r := httptest.NewRequest("GET", "http://example.com/path?q=1", nil)
	r.RemoteAddr = remote
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	caddyhttp.NewTestReplacer(r) // puts the replacer in r's context
	return r
}

func TestTemplateKey(t *testing.T) {
	for _, tc := range []struct {
		tmpl   string
		v4, v6 int
		remote string
		hdr    map[string]string
		want   string
	}{
		{"{http.request.remote.host}", 0, 0, "192.0.2.7:1234", nil, "192.0.2.7"},
		{"{http.request.remote.host}", 24, 0, "192.0.2.7:1234", nil, "192.0.2.0/24"},
		{"{http.request.remote}", 0, 0, "192.0.2.7:1234", nil, "192.0.2.7"},
		{"{http.request.remote.host}", 0, 64, "[2001:db8:a:b:c::1]:1234", nil, "2001:db8:a:b::/64"},
		{"{http.request.remote.host}", 0, 0, "[2001:db8:a:b:c::1]:1234", nil, "2001:db8:a:b:c::1"},
		{"{http.request.header.X-Org-Id}:{http.request.method}", 0, 0, "192.0.2.7:1", map[string]string{"X-Org-Id": "acme"}, "acme:GET"},
		{"{http.request.header.X-Org-Id}", 0, 0, "192.0.2.7:1", nil, ""},
		{"{http.request.header.X-Forwarded-For}", 16, 0, "192.0.2.7:1", map[string]string{"X-Forwarded-For": "10.9.8.7"}, "10.9.0.0/16"},
		{"static", 0, 0, "192.0.2.7:1", nil, "static"},
		{"10.0.0.1", 8, 0, "192.0.2.7:1", nil, "10.0.0.0/8"},
		{"{unknown.placeholder}", 0, 0, "192.0.2.7:1", nil, ""},
		{"", 0, 0, "192.0.2.7:1", nil, ""},
	} {
		tpl, err := NewTemplate(tc.tmpl, tc.v4, tc.v6)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tpl.Key(newRequest(tc.remote, tc.hdr))
		if err != nil || got != tc.want {
			t.Errorf("%q (v4=%d v6=%d) on %s %v: got %q, %v; want %q", tc.tmpl, tc.v4, tc.v6, tc.remote, tc.hdr, got, err, tc.want)
		}
	}
}

func TestTemplateKeyWithoutReplacer(t *testing.T) {
	tpl, _ := NewTemplate("{http.request.remote.host}x", 0, 0)
	r := httptest.NewRequest("GET", "/", nil)
	if got, err := tpl.Key(r); err != nil || got != "x" {
		t.Fatalf("got %q, %v", got, err)
	}
}

// The direct evaluation of {http.request.remote.host} agrees with Caddy's
// replacer.
func TestRemoteHostFastPath(t *testing.T) {
	fast, _ := NewTemplate("{http.request.remote.host}", 24, 64)
	slow, _ := NewTemplate("{http.request.remote.host}{unknown}", 24, 64) // the replacer's way
	if !fast.remoteHost || slow.remoteHost {
		t.Fatal("fast path not chosen as expected")
	}
	for _, remote := range []string{"192.0.2.7:1234", "[2001:db8::1]:443", "[fe80::1%eth0]:1", "@", "", "/tmp/sock", "garbage:"} {
		r := newRequest(remote, nil)
		a, _ := fast.Key(r)
		b, _ := slow.Key(r)
		if a != b {
			t.Errorf("remote %q: fast %q, replacer %q", remote, a, b)
		}
	}
	r := newRequest("192.0.2.7:1234", nil)
	r.TLS = &tls.ConnectionState{HandshakeComplete: false}
	a, _ := fast.Key(r)
	b, _ := slow.Key(r)
	if a != "" || b != "" {
		t.Errorf("early data: fast %q, replacer %q, want both empty", a, b)
	}
	r = newRequest("192.0.2.7:1234", nil)
	full, _ := NewTemplate("{http.request.remote.host}", 0, 0)
	if n := testing.AllocsPerRun(100, func() { _, _ = full.Key(r) }); n != 0 {
		t.Errorf("fast path allocates %v times", n)
	}
}

// The client address Caddy resolves (trusted_proxies) is the var
// client_ip: {http.vars.client_ip}, {client_ip} in a Caddyfile, and the
// alias {http.request.client_ip}; prefixes group it like any address.
func TestClientIP(t *testing.T) {
	r := httptest.NewRequest("GET", "http://example.com/", nil)
	r.RemoteAddr = "10.0.0.1:5000" // the proxy
	r = r.WithContext(context.WithValue(r.Context(), caddyhttp.VarsCtxKey, map[string]any{caddyhttp.ClientIPVarKey: "2001:db8:1:2:3:4:5:6"}))
	caddyhttp.NewTestReplacer(r)
	for _, c := range []struct{ tmpl, want string }{
		{"{http.vars.client_ip}", "2001:db8:1:2::/64"},
		{"{http.request.client_ip}", "2001:db8:1:2::/64"},
		{"{http.request.client_ip}:{http.request.method}", "2001:db8:1:2:3:4:5:6:GET"},
	} {
		tp, err := NewTemplate(c.tmpl, 0, 64)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := tp.Key(r); got != c.want {
			t.Errorf("%s: key %q, want %q", c.tmpl, got, c.want)
		}
	}
}

func TestUnsetPathSegment(t *testing.T) {
	for _, c := range []struct{ tmpl, want string }{
		{"{http.request.uri.path.0}", ""},
		{"{http.request.uri.path.12}-{http.request.uri.path.id}", "{http.request.uri.path.id}"},
		{"{http.request.uri.path.-1}", "{http.request.uri.path.-1}"},
		{"{http.request.uri.path}", ""}, // the whole path
		{"{http.request.uri.path.x", ""},
		{"static", ""},
	} {
		got, ok := UnsetPathSegment(c.tmpl)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("UnsetPathSegment(%q) = %q, %v; want %q", c.tmpl, got, ok, c.want)
		}
	}
}

func TestUnknownRequestPlaceholder(t *testing.T) {
	for _, c := range []struct{ tmpl, want string }{
		{"{http.request.header.X-Api-Key}:{http.request.method}", ""},
		{"{http.request.remote.host/24}{http.request.uri.query.page}{http.request.cookie.sid}", ""},
		{"{http.request.tls.client.fingerprint}{http.request.host.labels.1}{http.request.uri.path.0}", ""},
		{"{http.request.orig_uri.path.dir}{http.request.uuid}{http.vars.tenant}{nonsense}", ""}, // other namespaces: not Caddy's alone
		{"{http.request.haeder.X-Api-Key}", "{http.request.haeder.X-Api-Key}"},
		{"a-{http.request.method}-{http.request.remote_host}", "{http.request.remote_host}"},
		{"{http.request.header.X Api}", "{http.request.header.X Api}"},
		{"{http.request.header.}", "{http.request.header.}"},
		{"{http.request.cookie.}", "{http.request.cookie.}"},
		{"{http.request.header.X", ""}, // unclosed: CheckTemplate's
	} {
		got, ok := UnknownRequestPlaceholder(c.tmpl)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("UnknownRequestPlaceholder(%q) = %q, %v; want %q", c.tmpl, got, ok, c.want)
		}
	}
}

func TestLiteral(t *testing.T) {
	for tmpl, want := range map[string]string{
		"{http.request.header.X-Plan}":    "",
		"1{a}0":                           "10",
		`x\{{a}\}`:                        "x{}",
		"pre-{http.request.method}:{b}-x": "pre-:-x",
		"plain":                           "plain",
	} {
		if got := Literal(tmpl); got != want {
			t.Errorf("Literal(%q) = %q, want %q", tmpl, got, want)
		}
	}
}
