package ratelimit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/zonelimit/caddy-ratelimit/keyresolver"
	"github.com/zonelimit/caddy-ratelimit/redisstore"
	"github.com/zonelimit/caddy-ratelimit/store"
)

func init() {
	caddy.RegisterModule(AdminAPI{})
}

// AdminAPI is the admin API of the rate limits, served on Caddy's admin
// endpoint (and its access control) under /rate_limit/:
//
//	GET    /rate_limit/zones                          the zones of the running config
//	GET    /rate_limit/zones/<zone>/keys/<key>        a key's state, per tier
//	DELETE /rate_limit/zones/<zone>/keys/<key>        reset the key
//	POST   /rate_limit/zones/<zone>/keys/<key>/block  block the key, body {"duration": "1h"}
//	DELETE /rate_limit/zones/<zone>/keys/<key>/block  unblock the key
//
// Zone names and keys are path segments, URL-escaped (a key may hold '/').
// A key is the zone's key as the handler forms it: an address is grouped
// by the zone's prefixes (203.0.113.7 is 203.0.113.0/24 with ipv4_prefix
// 24) and a key longer than 256 bytes is hashed. With store memory a call
// acts on this instance's counts; with store redis on the fleet's.
//
// It is not configurable.
type AdminAPI struct {
	// reg identifies the config load the router was provisioned with:
	// Caddy starts the admin endpoint anew with every config load, and
	// each load has its own metrics registry (see loadKey).
	reg *prometheus.Registry

	// active returns the registry of the config load Caddy runs, nil
	// when none runs. nil means caddy.ActiveContext's; tests replace it.
	active func() *prometheus.Registry
}

// CaddyModule returns the Caddy module information.
func (AdminAPI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.rate_limit",
		New: func() caddy.Module { return new(AdminAPI) },
	}
}

// Provision finds the router's config load.
func (a *AdminAPI) Provision(ctx caddy.Context) error {
	a.reg = ctx.GetMetricsRegistry()
	return nil
}

// Routes returns the routes of the API, all under /rate_limit/.
func (a *AdminAPI) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{{Pattern: "/rate_limit/", Handler: caddy.AdminHandlerFunc(a.serveHTTP)}}
}

// Answers of the API.
type (
	// adminZones answers GET /rate_limit/zones.
	adminZones struct {
		// Zones are the running config's zones, in the order they were
		// provisioned.
		Zones []adminZone `json:"zones"`
	}
	adminZone struct {
		// Name is the zone's name.
		Name string `json:"name"`

		// Store is where its counts live: "memory", "redis", or
		// "redis_sync" (redis with sync_interval: the two-layer store).
		Store string `json:"store"`

		// Algorithm is the zone's algorithm.
		Algorithm string `json:"algorithm"`

		// Tiers are the zone's limits, in order.
		Tiers []adminTier `json:"tiers"`

		// Keys is how many keys the zone holds in this instance's
		// memory (store memory, or the two-layer store's local layer);
		// absent for store redis.
		Keys *int `json:"keys,omitempty"`
	}
	adminTier struct {
		// Events is how many units the tier admits per window.
		Events int64 `json:"events"`

		// Window is the tier's window, as a Go duration ("1m0s").
		Window string `json:"window"`
	}
	// adminKey answers a request about one key.
	adminKey struct {
		// Zone is the zone's name.
		Zone string `json:"zone"`

		// Key is the key as the zone's handler forms it (an address
		// grouped by the zone's prefixes, a long key hashed).
		Key string `json:"key"`

		// Tiers is the key's state per tier (GET only).
		Tiers []adminTierState `json:"tiers,omitempty"`

		// BlockedUntil is when the key's block ends; absent when it is
		// not blocked.
		BlockedUntil *time.Time `json:"blocked_until,omitempty"`
	}
	adminTierState struct {
		// Limit is the tier's capacity in units: its events, or the
		// burst of a bucket algorithm.
		Limit int64 `json:"limit"`

		// Window is the tier's window, as a Go duration.
		Window string `json:"window"`

		// Used is Limit - Remaining.
		Used int64 `json:"used"`

		// Remaining is how many units the tier would admit now.
		Remaining int64 `json:"remaining"`

		// ResetAfter is how long until the tier is whole again if
		// nothing more arrives, as a Go duration ("0s" when whole).
		ResetAfter string `json:"reset_after"`
	}
	// adminBlockRequest is the body of POST .../block.
	adminBlockRequest struct {
		// Duration is how long the key is refused, e.g. "1h" or "2d"
		// (or nanoseconds). Required, positive, at most 3650d (the
		// longest window: a store's block is exact up to it).
		Duration *caddy.Duration `json:"duration"`
	}
)

func (a *AdminAPI) serveHTTP(w http.ResponseWriter, r *http.Request) error {
	// The raw path: an escaped '/' in a key is not a separator.
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/rate_limit/")
	if !ok {
		return apiError(http.StatusNotFound, "not found")
	}
	// keys/ (and keys//) is the empty key, refused below, not a route.
	parts := strings.Split(rest, "/")
	if parts[0] != "zones" {
		return apiError(http.StatusNotFound, "not found: the API is under /rate_limit/zones")
	}
	if len(parts) == 1 || len(parts) == 2 && parts[1] == "" {
		if err := allow(w, r, http.MethodGet); err != nil {
			return err
		}
		return writeJSON(w, a.listZones())
	}
	if len(parts) < 4 || parts[2] != "keys" || len(parts) > 5 || len(parts) == 5 && parts[4] != "block" {
		return apiError(http.StatusNotFound, "not found: want /rate_limit/zones/<zone>/keys/<key>[/block]")
	}
	zoneName, err := url.PathUnescape(parts[1])
	if err != nil {
		return apiError(http.StatusBadRequest, fmt.Sprintf("zone name: %v", err))
	}
	rawKey, err := url.PathUnescape(parts[3])
	if err != nil {
		return apiError(http.StatusBadRequest, fmt.Sprintf("key: %v", err))
	}
	if len(zoneName) > maxZoneName {
		// Not echoed: it may be as long as the admin endpoint's header limit.
		return apiError(http.StatusNotFound, fmt.Sprintf("unknown zone: a zone name is at most %d characters", maxZoneName))
	}
	z := a.running().get(zoneName)
	if z == nil {
		return apiError(http.StatusNotFound, fmt.Sprintf("unknown zone %q", zoneName))
	}
	if rawKey == "" {
		return apiError(http.StatusBadRequest, "empty key")
	}
	blockPath := len(parts) == 5
	methods := []string{http.MethodGet, http.MethodDelete}
	if blockPath {
		methods = []string{http.MethodPost, http.MethodDelete}
	}
	if err := allow(w, r, methods...); err != nil {
		return err
	}
	var d time.Duration
	if blockPath && r.Method == http.MethodPost {
		if d, err = blockDuration(w, r); err != nil {
			return err
		}
	}
	op := func(z *zone) error {
		if blockPath {
			return a.block(w, r, z, z.adminKey(rawKey), d)
		}
		return a.key(w, r, z, z.adminKey(rawKey))
	}
	err = op(z)
	// A reload that unloads the config whose zone was found closes its
	// Redis client: the zone of the config that now runs answers.
	if closedClient(err) {
		if now := a.running().get(zoneName); now != nil && now != z {
			err = op(now)
		}
	}
	return err
}

// closedClient reports whether err is a store's failure on its Redis
// client closed under it.
func closedClient(err error) bool {
	var ae caddy.APIError // it has no Unwrap
	if errors.As(err, &ae) {
		err = ae.Err
	}
	return redisstore.Closed(err)
}

// storeFailed is the API's error for a store that failed to do what (a
// 502: the store is the upstream).
func storeFailed(z *zone, what string, err error) error {
	return caddy.APIError{HTTPStatus: http.StatusBadGateway, Err: fmt.Errorf("zone %q: %s: %w", z.name, what, err)}
}

// key inspects (GET) or resets (DELETE) key in z.
func (a *AdminAPI) key(w http.ResponseWriter, r *http.Request, z *zone, key string) error {
	ins, ok := z.store.(store.Inspector)
	if !ok {
		return apiError(http.StatusNotImplemented, fmt.Sprintf("zone %q: its store cannot inspect or reset keys", z.name))
	}
	ctx := r.Context()
	if r.Method == http.MethodDelete {
		if err := redisstore.RetryMoved(ctx, func() error { return ins.Reset(ctx, key) }); err != nil {
			return storeFailed(z, "resetting key", err)
		}
		// The on_error local fallback counts the same keys while Redis
		// fails: it starts afresh too.
		if fb, ok := z.fallback.(store.Inspector); ok {
			if err := fb.Reset(ctx, key); err != nil {
				return apiError(http.StatusInternalServerError, fmt.Sprintf("zone %q: resetting key in the local fallback: %v", z.name, err))
			}
		}
		return writeJSON(w, adminKey{Zone: z.name, Key: key})
	}
	var ks store.KeyState
	err := redisstore.RetryMoved(ctx, func() (err error) {
		ks, err = ins.Inspect(ctx, key, time.Time{})
		return err
	})
	if err != nil {
		return storeFailed(z, "inspecting key", err)
	}
	out := adminKey{Zone: z.name, Key: key}
	for _, t := range ks.Tiers {
		out.Tiers = append(out.Tiers, adminTierState{
			Limit: t.Limit, Window: t.Window.String(), Used: t.Used, Remaining: t.Remaining,
			ResetAfter: t.ResetAfter.String(),
		})
	}
	if b, ok := z.store.(store.Blocker); ok && ks.BlockedUntil.IsZero() {
		if ks.BlockedUntil, err = b.BlockedUntil(ctx, key, time.Time{}); err != nil {
			return storeFailed(z, "reading the key's block", err)
		}
	}
	if !ks.BlockedUntil.IsZero() {
		out.BlockedUntil = &ks.BlockedUntil
	}
	return writeJSON(w, out)
}

// block blocks (POST) key in z for d, or unblocks it (DELETE).
func (a *AdminAPI) block(w http.ResponseWriter, r *http.Request, z *zone, key string, d time.Duration) error {
	if _, leasing := z.store.(*redisstore.LeaseStore); leasing {
		return apiError(http.StatusNotImplemented, fmt.Sprintf("zone %q: a lease zone cannot block keys: its instances admit from the units they leased without asking Redis, where a block is kept", z.name))
	}
	b, ok := z.store.(store.Blocker)
	if !ok {
		return apiError(http.StatusNotImplemented, fmt.Sprintf("zone %q: its store cannot block keys", z.name))
	}
	out := adminKey{Zone: z.name, Key: key}
	if r.Method == http.MethodDelete {
		if err := b.Unblock(r.Context(), key); err != nil {
			return storeFailed(z, "unblocking key", err)
		}
		return writeJSON(w, out)
	}
	until, err := b.Block(r.Context(), key, time.Time{}, d)
	if err != nil {
		return storeFailed(z, "blocking key", err)
	}
	out.BlockedUntil = &until
	return writeJSON(w, out)
}

// maxBlockBody bounds the body of POST .../block, {"duration": "1h"}.
const maxBlockBody = 1 << 10

// blockDuration reads the body of POST .../block: one adminBlockRequest,
// nothing else, with a duration the stores can keep.
func blockDuration(w http.ResponseWriter, r *http.Request) (time.Duration, error) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBlockBody))
	dec.DisallowUnknownFields()
	var req adminBlockRequest
	err := dec.Decode(&req)
	if err == nil {
		if _, next := dec.Token(); next != io.EOF {
			err = errors.New("more after the object")
		} else if req.Duration == nil {
			err = errors.New("duration is missing")
		}
	}
	if mb := (*http.MaxBytesError)(nil); errors.As(err, &mb) {
		return 0, apiError(http.StatusRequestEntityTooLarge, fmt.Sprintf(`body: want {"duration": "1h"}, at most %d bytes`, maxBlockBody))
	}
	if err != nil {
		return 0, apiError(http.StatusBadRequest, fmt.Sprintf(`body: want {"duration": "1h"}: %v`, err))
	}
	switch d := time.Duration(*req.Duration); {
	case d <= 0:
		return 0, apiError(http.StatusBadRequest, fmt.Sprintf("duration must be positive, got %s", d))
	case d > maxWindow:
		// The memory store's end instant would overflow, and Redis's
		// arithmetic is exact only up to the longest window.
		return 0, apiError(http.StatusBadRequest, fmt.Sprintf("duration must be at most %dd (about 10 years), got %s", maxWindow/(24*time.Hour), d))
	default:
		return d, nil
	}
}

// adminKey is the key the zone's handler forms for a request whose
// resolved key is raw: an address grouped by the zone's prefixes, an
// overlong key hashed. A key already in that form is kept.
func (z *zone) adminKey(raw string) string {
	key := raw
	if t, ok := z.resolver.(*keyresolver.Template); ok {
		key = t.Group(key)
	}
	if len(key) > maxKeyLen {
		key = hashKey(key)
	}
	return key
}

// allow answers 405 unless r's method is one of methods.
func allow(w http.ResponseWriter, r *http.Request, methods ...string) error {
	for _, m := range methods {
		if r.Method == m {
			return nil
		}
	}
	w.Header().Set("Allow", strings.Join(methods, ", ")) // RFC 9110: a 405 names them
	return caddy.APIError{
		HTTPStatus: http.StatusMethodNotAllowed,
		Err:        fmt.Errorf("method %s not allowed here (allowed: %s)", r.Method, strings.Join(methods, ", ")),
	}
}

func apiError(status int, msg string) error {
	return caddy.APIError{HTTPStatus: status, Err: errors.New(msg)}
}

func writeJSON(w http.ResponseWriter, v any) error {
	w.Header().Set("Content-Type", "application/json")
	return json.NewEncoder(w).Encode(v)
}

// Interface guards.
var (
	_ caddy.Provisioner = (*AdminAPI)(nil)
	_ caddy.AdminRouter = (*AdminAPI)(nil)
)
