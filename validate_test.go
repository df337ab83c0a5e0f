package ratelimit

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// validZone returns a minimal valid zone named name.
func validZone(name string) *Zone {
	return &Zone{
		Name:   name,
		Key:    "{http.request.remote.host}",
		Limits: []Limit{{Events: 10, Window: caddy.Duration(time.Second)}},
	}
}

func TestValidateValid(t *testing.T) {
	tests := []struct {
		name string
		h    Handler
	}{
		{"minimal", Handler{Zones: []*Zone{validZone("a")}}},
		{"two zones", Handler{Zones: []*Zone{validZone("a"), validZone("b")}}},
		{"key resolver instead of key", Handler{Zones: []*Zone{{
			Name:           "jwt",
			KeyResolverRaw: json.RawMessage(`{"resolver":"jwt_claim"}`),
			Limits:         []Limit{{Events: 1, Window: caddy.Duration(time.Millisecond)}},
		}}}},
		{"every option", Handler{
			Zones: []*Zone{{
				Name:          "api",
				Key:           "{http.request.header.X-Org-Id}:{http.request.method}",
				Algorithm:     "token_bucket",
				Limits:        []Limit{{Events: 100, Window: caddy.Duration(time.Second)}, {Events: 1000, Window: caddy.Duration(time.Minute)}},
				Burst:         50,
				Cost:          "{http.request.header.X-Cost}",
				OnLimit:       "wait",
				MaxWait:       caddy.Duration(2 * time.Second),
				CountRejected: true,
				IPv4Prefix:    24,
				IPv6Prefix:    64,
				EmptyKey:      "deny",
			}},
			Store:         "memory",
			Headers:       "ietf",
			Status:        503,
			DryRun:        true,
			Jitter:        1,
			SweepInterval: caddy.Duration(time.Minute),
			MaxKeys:       10,
		}},
		// What Provision leaves behind once it has filled in the defaults.
		{"defaults filled in", Handler{
			Zones: []*Zone{{
				Name:       "a",
				Key:        "{http.request.remote.host}",
				Algorithm:  "sliding_log",
				Limits:     []Limit{{Events: 10, Window: caddy.Duration(time.Second)}},
				Cost:       "1",
				OnLimit:    "reject",
				IPv4Prefix: 32,
				IPv6Prefix: 128,
				EmptyKey:   "global",
			}},
			Store:         "memory",
			Headers:       "both",
			Status:        429,
			SweepInterval: caddy.Duration(time.Minute),
			MaxKeys:       1000000,
		}},
		{"concurrency", Handler{Zones: []*Zone{{
			Name: "c", Key: "k", Algorithm: "concurrency",
			Limits: []Limit{{Events: 3, Window: caddy.Duration(time.Minute)}},
		}}}},
		{"every algorithm name", Handler{Zones: []*Zone{
			{Name: "a", Key: "k", Algorithm: "sliding_log", Limits: []Limit{{Events: 5, Window: caddy.Duration(time.Second)}}},
			{Name: "b", Key: "k", Algorithm: "sliding_window", Limits: []Limit{{Events: 5, Window: caddy.Duration(time.Second)}}},
			{Name: "c", Key: "k", Algorithm: "fixed_window", Limits: []Limit{{Events: 5, Window: caddy.Duration(time.Second)}}},
			{Name: "d", Key: "k", Algorithm: "token_bucket", Burst: 1, Limits: []Limit{{Events: 5, Window: caddy.Duration(time.Second)}}},
			{Name: "e", Key: "k", Algorithm: "leaky_bucket", Burst: 10, Limits: []Limit{{Events: 5, Window: caddy.Duration(time.Second)}}},
			{Name: "f", Key: "k", Algorithm: "gcra", Burst: 3, Limits: []Limit{{Events: 5, Window: caddy.Duration(time.Second)}}},
			{Name: "g", Key: "k", Algorithm: "concurrency", Limits: []Limit{{Events: 5, Window: caddy.Duration(time.Second)}}},
		}}},
		{"cost equal to limit", Handler{Zones: []*Zone{{
			Name: "a", Key: "k", Cost: "10",
			Limits: []Limit{{Events: 10, Window: caddy.Duration(time.Second)}},
		}}}},
		{"zone name with punctuation", Handler{Zones: []*Zone{validZone("api/v1:login-2.x")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.h.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
		})
	}
}

func TestValidateInvalid(t *testing.T) {
	zone := func(f func(z *Zone)) *Zone {
		z := validZone("z")
		f(z)
		return z
	}
	one := func(f func(z *Zone)) Handler { return Handler{Zones: []*Zone{zone(f)}} }
	opts := func(f func(h *Handler)) Handler {
		h := Handler{Zones: []*Zone{validZone("z")}}
		f(&h)
		return h
	}
	tests := []struct {
		name string
		h    Handler
		want string
	}{
		{"no zones", Handler{}, "no zones"},
		{"null zone", Handler{Zones: []*Zone{nil}}, "zone 1: empty (null) zone"},
		{"no name", one(func(z *Zone) { z.Name = "" }), "zone 1: zone name is empty"},
		{"name with space", one(func(z *Zone) { z.Name = "a b" }), `zone name "a b"`},
		{"name with quote", one(func(z *Zone) { z.Name = `a"b` }), "zone name"},
		{"name with brace", one(func(z *Zone) { z.Name = "a{b}" }), "zone name"},
		{"name not ASCII", one(func(z *Zone) { z.Name = "zoné" }), "zone name"},
		{"name too long", one(func(z *Zone) { z.Name = strings.Repeat("a", 129) }), "longer than 128"},
		{"duplicate names", Handler{Zones: []*Zone{validZone("a"), validZone("b"), validZone("a")}}, `duplicate zone name "a" (zones 1 and 3)`},
		{"no key", one(func(z *Zone) { z.Key = "" }), `zone "z": no key`},
		{"key and resolver", one(func(z *Zone) { z.KeyResolverRaw = json.RawMessage(`{"resolver":"x"}`) }), "mutually exclusive"},
		{"unknown algorithm", one(func(z *Zone) { z.Algorithm = "leaky" }), `unknown algorithm "leaky" (want one of sliding_log, sliding_window, fixed_window, token_bucket, leaky_bucket, gcra, concurrency)`},
		{"no limits", one(func(z *Zone) { z.Limits = nil }), `zone "z": no limit`},
		{"zero events", one(func(z *Zone) { z.Limits[0].Events = 0 }), "limit 1: events must be positive, got 0"},
		{"negative events", one(func(z *Zone) {
			z.Limits = append(z.Limits, Limit{Events: -1, Window: caddy.Duration(time.Minute)})
		}), "limit 2: events must be positive, got -1"},
		{"zero window", one(func(z *Zone) { z.Limits[0].Window = 0 }), "limit 1: window must be at least 1ms, got 0s"},
		{"negative window", one(func(z *Zone) { z.Limits[0].Window = caddy.Duration(-time.Second) }), "window must be at least 1ms, got -1s"},
		{"window under 1ms", one(func(z *Zone) { z.Limits[0].Window = caddy.Duration(999 * time.Microsecond) }), "window must be at least 1ms"},
		{"concurrency two limits", one(func(z *Zone) {
			z.Algorithm = "concurrency"
			z.Limits = append(z.Limits, Limit{Events: 100, Window: caddy.Duration(time.Hour)})
		}), "concurrency takes exactly one limit"},
		{"concurrency count_rejected", one(func(z *Zone) { z.Algorithm = "concurrency"; z.CountRejected = true }), "count_rejected does not apply to algorithm concurrency"},
		{"burst default algorithm", one(func(z *Zone) { z.Burst = 5 }), "burst applies only to algorithms token_bucket, leaky_bucket and gcra, not sliding_log"},
		{"burst sliding_window", one(func(z *Zone) { z.Algorithm = "sliding_window"; z.Burst = 5 }), "not sliding_window"},
		{"burst concurrency", one(func(z *Zone) { z.Algorithm = "concurrency"; z.Burst = 5 }), "not concurrency"},
		{"negative burst", one(func(z *Zone) { z.Algorithm = "gcra"; z.Burst = -1 }), "burst must be positive, got -1"},
		{"cost word", one(func(z *Zone) { z.Cost = "heavy" }), `cost must be a positive integer or a placeholder, got "heavy"`},
		{"cost zero", one(func(z *Zone) { z.Cost = "0" }), "cost must be positive, got 0"},
		{"cost negative", one(func(z *Zone) { z.Cost = "-3" }), "cost must be positive, got -3"},
		{"cost unterminated placeholder", one(func(z *Zone) { z.Cost = "{http.request.header.X" }), "unterminated placeholder"},
		{"cost above bound", one(func(z *Zone) { z.Cost = "1125899906842625" }), "cost must be at most 1125899906842624"},
		{"cost above events", one(func(z *Zone) { z.Cost = "11" }), "cost 11 exceeds limit 1 (10 events)"},
		{"cost above burst", one(func(z *Zone) { z.Algorithm = "token_bucket"; z.Burst = 3; z.Cost = "4" }), "cost 4 exceeds limit 1 (3 burst)"},
		{"on_limit unknown", one(func(z *Zone) { z.OnLimit = "queue" }), `unknown on_limit value "queue" (want one of reject, wait)`},
		{"wait without max_wait", one(func(z *Zone) { z.OnLimit = "wait" }), "on_limit wait needs a positive max_wait"},
		{"wait negative max_wait", one(func(z *Zone) { z.OnLimit = "wait"; z.MaxWait = caddy.Duration(-time.Second) }), "needs a positive max_wait"},
		{"max_wait without wait", one(func(z *Zone) { z.MaxWait = caddy.Duration(time.Second) }), "max_wait applies only with on_limit wait"},
		{"max_wait with reject", one(func(z *Zone) { z.OnLimit = "reject"; z.MaxWait = caddy.Duration(time.Second) }), "max_wait applies only with on_limit wait"},
		{"ipv4_prefix 33", one(func(z *Zone) { z.IPv4Prefix = 33 }), "ipv4_prefix must be between 1 and 32 bits, got 33"},
		{"ipv4_prefix negative", one(func(z *Zone) { z.IPv4Prefix = -1 }), "ipv4_prefix must be between 1 and 32 bits, got -1"},
		{"ipv6_prefix 129", one(func(z *Zone) { z.IPv6Prefix = 129 }), "ipv6_prefix must be between 1 and 128 bits, got 129"},
		{"empty_key unknown", one(func(z *Zone) { z.EmptyKey = "skip" }), `unknown empty_key value "skip" (want one of allow, deny, global)`},
		{"store unknown", opts(func(h *Handler) { h.Store = "disk" }), `unknown store "disk" (want one of memory, redis)`},
		{"headers unknown", opts(func(h *Handler) { h.Headers = "all" }), `unknown headers value "all" (want one of ietf, legacy, both, off)`},
		{"status 200", opts(func(h *Handler) { h.Status = 200 }), "status must be a 4xx or 5xx code (400 to 599), got 200"},
		{"status 399", opts(func(h *Handler) { h.Status = 399 }), "got 399"},
		{"status 600", opts(func(h *Handler) { h.Status = 600 }), "got 600"},
		{"status negative", opts(func(h *Handler) { h.Status = -429 }), "got -429"},
		{"jitter above 1", opts(func(h *Handler) { h.Jitter = 1.01 }), "jitter must be a fraction between 0 and 1, got 1.01"},
		{"jitter negative", opts(func(h *Handler) { h.Jitter = -0.5 }), "got -0.5"},
		{"jitter NaN", opts(func(h *Handler) { h.Jitter = math.NaN() }), "got NaN"},
		{"jitter infinite", opts(func(h *Handler) { h.Jitter = math.Inf(1) }), "got +Inf"},
		{"sweep_interval negative", opts(func(h *Handler) { h.SweepInterval = caddy.Duration(-time.Second) }), "sweep_interval must not be negative, got -1s"},
		{"max_keys negative", opts(func(h *Handler) { h.MaxKeys = -1 }), "max_keys must not be negative, got -1"},
		{"second zone named in error", Handler{Zones: []*Zone{validZone("ok"), zone(func(z *Zone) { z.Name = "bad"; z.Limits = nil })}}, `zone "bad": no limit`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.h.Validate()
			if err == nil {
				t.Fatalf("Validate succeeded, want an error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

// TestValidateJSON decodes handler configurations as Caddy would from JSON
// and validates them.
func TestValidateJSON(t *testing.T) {
	tests := []struct {
		name string
		json string
		want string // empty: valid
	}{
		{"minimal", `{"zones":[{"name":"a","key":"{http.request.remote.host}","limits":[{"events":10,"window":1000000000}]}]}`, ""},
		{"duration strings", `{"zones":[{"name":"a","key":"k","limits":[{"events":10,"window":"1m"}],"on_limit":"wait","max_wait":"500ms"}],"sweep_interval":"30s"}`, ""},
		{"window in days", `{"zones":[{"name":"a","key":"k","limits":[{"events":10,"window":"1d"}]}]}`, ""},
		{"window as bare number", `{"zones":[{"name":"a","key":"k","limits":[{"events":10,"window":1000}]}]}`, "window must be at least 1ms, got 1µs"},
		{"events missing", `{"zones":[{"name":"a","key":"k","limits":[{"window":"1s"}]}]}`, "events must be positive, got 0"},
		{"limits empty", `{"zones":[{"name":"a","key":"k","limits":[]}]}`, "no limit"},
		{"zones empty", `{"zones":[]}`, "no zones"},
		{"empty object", `{}`, "no zones"},
		{"duplicate zone names", `{"zones":[{"name":"a","key":"k","limits":[{"events":1,"window":"1s"}]},{"name":"a","key":"k","limits":[{"events":1,"window":"1s"}]}]}`, `duplicate zone name "a"`},
		{"burst above bound", `{"zones":[{"name":"a","key":"k","algorithm":"token_bucket","burst":9007199254740991,"limits":[{"events":7,"window":"8760h"}]}]}`, "burst must be at most 1125899906842624"},
		{"longest window", `{"zones":[{"name":"a","key":"k","algorithm":"sliding_window","limits":[{"events":1125899906842624,"window":"3650d"}]}]}`, ""},
		{"window above bound", `{"zones":[{"name":"a","key":"k","algorithm":"sliding_window","limits":[{"events":1,"window":315360000000001000}]}]}`, "limit 1: window must be at most 3650d (about 10 years), got 87600h0m0.000001s"},
		{"window past 2^53 microseconds", `{"zones":[{"name":"a","key":"k","algorithm":"sliding_window","limits":[{"events":1,"window":"104300d"}]}]}`, "window must be at most 3650d"},
		{"events above bound", `{"zones":[{"name":"a","key":"k","limits":[{"events":1125899906842625,"window":"1s"}]}]}`, "limit 1: events must be at most 1125899906842624"},
		{"bucket numbers too large for the algorithm", `{"zones":[{"name":"a","key":"k","algorithm":"token_bucket","burst":1125899906842624,"limits":[{"events":7,"window":"8760h"}]}]}`, "burst"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Handler
			dec := json.NewDecoder(strings.NewReader(tt.json))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&h); err != nil {
				t.Fatalf("decode: %v", err)
			}
			err := h.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tt.want != "" && err == nil:
				t.Fatalf("Validate succeeded, want an error containing %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Fatalf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

// TestValidateDoesNotModify checks that Validate leaves the configuration
// alone: defaults are Provision's job.
func TestValidateDoesNotModify(t *testing.T) {
	h := Handler{Zones: []*Zone{validZone("a")}}
	before, _ := json.Marshal(h)
	if err := h.Validate(); err != nil {
		t.Fatal(err)
	}
	after, _ := json.Marshal(h)
	if string(before) != string(after) {
		t.Fatalf("Validate changed the config:\n%s\n%s", before, after)
	}
}
