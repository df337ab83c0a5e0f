package ratelimit

import (
	"fmt"
	"slices"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
)

// MholtRateLimit is a zone in the shape of mholt/caddy-ratelimit's JSON
// (an entry of rate_limits): at most MaxEvents requests per Window and
// key, over an exact rolling window (sliding_log), or, with MaxConcurrent,
// at most that many requests of a key in flight (concurrency).
type MholtRateLimit struct {
	// MatcherSetsRaw restricts the zone to the requests that match.
	// Default: every request the handler sees.
	MatcherSetsRaw caddyhttp.RawMatcherSets `json:"match,omitempty" caddy:"namespace=http.matchers"`

	// Key is a placeholder template evaluated per request (see Zone.Key).
	// Default: none (one count for all the zone's requests, as in
	// mholt/caddy-ratelimit).
	Key string `json:"key,omitempty"`

	// MaxEvents is how many requests a key may make per window. Required,
	// positive, unless MaxConcurrent is set.
	MaxEvents int64 `json:"max_events,omitempty"`

	// Window is the length of the rolling window (nanoseconds in JSON, or
	// a duration string such as "1m"). Required, at least 1ms, unless
	// MaxConcurrent is set.
	Window caddy.Duration `json:"window,omitempty"`

	// MaxConcurrent, instead of MaxEvents and Window, makes the zone a
	// concurrency limit: at most this many requests of a key in flight,
	// each holding its slot until it ends, or for a day at most
	// (mholtLeaseWindow). Default: 0 (a window zone).
	MaxConcurrent int64 `json:"max_concurrent,omitempty"`

	// IPv4Prefix groups IPv4 client addresses in the key by this many
	// leading bits (see Zone.IPv4Prefix). Default: 32 (each address alone).
	IPv4Prefix int `json:"ipv4_prefix,omitempty"`

	// IPv6Prefix groups IPv6 client addresses in the key by this many
	// leading bits (see Zone.IPv6Prefix). Default: 128 (each address
	// alone).
	IPv6Prefix int `json:"ipv6_prefix,omitempty"`
}

// distributedInstead tells a config with mholt/caddy-ratelimit's
// distributed or storage what to write instead.
const distributedInstead = "use store redis (and a redis address), which shares one exact count between instances instead of periodic snapshots"

// convertMholt turns the options in mholt/caddy-ratelimit's shape into
// this module's: rate_limits become zones, appended in name order (so that
// a config gives the same zones, in the same order, on every load), and
// log_key is log_keys. Its distributed mode and storage have no
// counterpart: they are refused with the message the Caddyfile gives.
func (h *Handler) convertMholt() error {
	for _, opt := range []struct {
		name string
		raw  []byte
	}{{"distributed", h.Distributed}, {"storage", h.StorageRaw}} {
		if len(opt.raw) > 0 && string(opt.raw) != "null" {
			return fmt.Errorf("%s (from mholt/caddy-ratelimit) is not supported: "+distributedInstead, opt.name)
		}
	}
	if h.LogKey {
		h.LogKeys = true
	}
	names := make([]string, 0, len(h.RateLimits))
	for name := range h.RateLimits {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		rl := h.RateLimits[name]
		if rl == nil {
			return fmt.Errorf("rate_limits: zone %q is empty (null)", name)
		}
		z := &Zone{
			Name:           name,
			MatcherSetsRaw: rl.MatcherSetsRaw,
			Key:            rl.Key,
			Algorithm:      algorithms.SlidingLog,
			Limits:         []Limit{{Events: rl.MaxEvents, Window: rl.Window}},
			IPv4Prefix:     rl.IPv4Prefix,
			IPv6Prefix:     rl.IPv6Prefix,
		}
		if rl.MaxConcurrent != 0 {
			if rl.MaxEvents != 0 || rl.Window != 0 {
				return fmt.Errorf("rate_limits: zone %q: max_concurrent cannot be used with window and max_events", name)
			}
			if rl.MaxConcurrent < 0 {
				return fmt.Errorf("rate_limits: zone %q: max_concurrent must be positive, got %d", name, rl.MaxConcurrent)
			}
			setMaxConcurrent(z, rl.MaxConcurrent)
		}
		h.Zones = append(h.Zones, z)
	}
	// Converted once: Validate, which Caddy runs after Provision, sees
	// them as zones.
	h.RateLimits = nil
	return nil
}

// mholtLeaseWindow is how long a request of a max_concurrent zone holds its
// slot at most. There a slot was held until the request ended, however
// long; a day keeps that for all but the longest connections, and still
// frees the slots of a crashed instance that shares a Redis store.
const mholtLeaseWindow = 24 * time.Hour

// setMaxConcurrent makes z the concurrency zone that mholt/caddy-ratelimit's
// max_concurrent n (JSON or Caddyfile) describes.
func setMaxConcurrent(z *Zone, n int64) {
	z.Algorithm = algorithms.Concurrency
	z.Limits = []Limit{{Events: n, Window: caddy.Duration(mholtLeaseWindow)}}
}
