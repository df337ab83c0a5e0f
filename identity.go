package ratelimit

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus"
)

// A zone's identity and the reload pool's keys: what makes two zones one
// limit (shared state, kept across reloads), and the check that one name
// is one limit in a config load.

// pool holds what outlives a config reload: the store of each zone (keyed
// by storeKey), the metrics' counters, and, while a config is loaded, the
// zones it defines (keyed by loadKey). It is the only package-level mutable
// state.
var pool = caddy.NewUsagePool()

// storeKey identifies a zone's store across handlers and config loads: a
// zone name is one limit in the whole config, so every handler naming it
// shares its store (its counts), in a site or in another, as they share its
// Redis keys with store redis.
//
// config is the zone's identity (see zoneIdentity): its name and every
// setting that gives its counts their meaning or says where they live, as
// JSON with the defaults filled in, plus a suffix for the stores a zone
// may have besides its main one (the on_error local fallback). A zone keeps
// its state across `caddy reload` when its identity is unchanged: the new
// config's handlers take the store before the old config's release it.
// Changing any of these settings starts the zone afresh. Its limits
// (limits and burst) are not part of it: a changed limit applies at once
// to what the zone has counted (the new handlers decide the store's keys
// under their own limits). Settings that only change what is done with a
// decision (match, cost, on_limit, max_wait, empty_key, headers, status,
// dry_run, jitter, on_error) keep the counts, and may differ between the
// handlers that name the zone: e.g. leaving dry_run keeps what was counted
// in it.
//
// Two zones of one name whose identities differ in one config load are a
// configuration error (see loadZones.claim), so a name never means two
// limits.
//
// scope is the handler's pool scope (see provisionOptions): empty but in
// tests.
type storeKey struct {
	scope  string
	config string
}

// loadKey is the pool key of the zones of one config load: Caddy gives
// each load a metrics registry of its own.
type loadKey struct {
	reg *prometheus.Registry
}

// loadZones is what the rate_limit handlers of one config load have
// defined so far: each zone name's identity and where it was first
// defined.
type loadZones struct {
	mu       sync.Mutex
	handlers int // handlers provisioned so far, to number them in errors
	zones    map[string]zoneDefinition
	running  runningZones // for the admin API (admin.go)
}

type zoneDefinition struct {
	identity string
	fields   map[string]json.RawMessage // identity by field, to name what differs
	place    string
}

func (*loadZones) Destruct() error { return nil }

// next numbers a handler of the load, from 1.
func (lz *loadZones) next() int {
	lz.mu.Lock()
	defer lz.mu.Unlock()
	lz.handlers++
	return lz.handlers
}

// claim records that the zone name with identity is defined at place, or
// fails when the load already defines that name with another identity.
func (lz *loadZones) claim(name, identity, place string) error {
	lz.mu.Lock()
	defer lz.mu.Unlock()
	def, ok := lz.zones[name]
	if !ok {
		lz.zones[name] = zoneDefinition{identity: identity, fields: identityFields(identity), place: place}
		return nil
	}
	if def.identity == identity {
		return nil
	}
	return fmt.Errorf("defined differently in %s and in %s (they differ in %s): "+
		"a zone name is one limit in the whole config, shared by every handler that names it, "+
		"so its limit settings must be the same everywhere; give one of them another name",
		def.place, place, strings.Join(differingFields(def.fields, identityFields(identity)), ", "))
}

// identityFields splits an identity's JSON by field.
func identityFields(identity string) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(identity), &m); err != nil {
		return nil
	}
	return m
}

// differingFields names, sorted, the fields in which a and b differ.
func differingFields(a, b map[string]json.RawMessage) []string {
	var names []string
	for k, v := range a {
		if w, ok := b[k]; !ok || string(v) != string(w) {
			names = append(names, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		names = []string{"settings"}
	}
	return names
}

// zoneIdentity is what gives a zone's counts their meaning and says where
// they live (see storeKey): the zone's limit settings (its Zone with the
// other fields left zero) and its handler's store settings, defaults
// filled in.
type zoneIdentity struct {
	Zone
	Store         string         `json:"store"`
	MaxKeys       int            `json:"max_keys"`
	SweepInterval caddy.Duration `json:"sweep_interval"`
	Redis         *redisLocation `json:"redis,omitempty"`
	SyncInterval  caddy.Duration `json:"sync_interval,omitempty"`
	Lease         caddy.Duration `json:"lease,omitempty"`
}

// redisLocation is which Redis database and keys hold a zone's counts (the
// resolved settings that choose them): handlers whose clients differ only
// in how they connect (timeouts, pool size, TLS, credentials) share the
// counts.
type redisLocation struct {
	Addresses         []string `json:"addresses,omitempty"`
	URL               string   `json:"url,omitempty"`
	SentinelMaster    string   `json:"sentinel_master,omitempty"`
	SentinelAddresses []string `json:"sentinel_addresses,omitempty"`
	DB                int      `json:"db,omitempty"`
	KeyPrefix         string   `json:"key_prefix"`
}

// storeIdentity returns the JSON of zc's zoneIdentity (which a config
// load's zones of one name must share), and that of its store: the same
// without the limits, so that a reload that changes them keeps the
// zone's counts (the store decides under the new limits, see
// store.Relimitable).
func (h *Handler) storeIdentity(zc *Zone) (identity, storeID string, err error) {
	resolver := zc.KeyResolverRaw
	if !zc.hasKeyResolver() {
		resolver = nil // JSON's null: the zone written without one
	}
	id := zoneIdentity{
		Zone: Zone{
			Name: zc.Name, Algorithm: zc.Algorithm, Limits: zc.Limits, Burst: zc.Burst,
			CountRejected: zc.CountRejected, Key: zc.Key, KeyResolverRaw: resolver,
			IPv4Prefix: zc.IPv4Prefix, IPv6Prefix: zc.IPv6Prefix, BlockFor: zc.BlockFor,
		},
		Store: h.Store, MaxKeys: h.MaxKeys, SweepInterval: h.SweepInterval,
	}
	if rc := h.rt.redisConf; h.onRedis() && rc != nil {
		// Another Redis, key prefix or mode is another count.
		id.Redis = &redisLocation{
			Addresses: rc.Addresses, URL: rc.URL,
			SentinelMaster: rc.SentinelMaster, SentinelAddresses: rc.SentinelAddresses,
			DB: rc.DB, KeyPrefix: rc.KeyPrefix,
		}
		id.SyncInterval = h.SyncInterval
		id.Lease = h.Lease
	}
	b, err := json.Marshal(id)
	if err != nil {
		return "", "", err
	}
	id.Limits, id.Burst = nil, 0
	sb, err := json.Marshal(id)
	return string(b), string(sb), err
}

// provisionLoad takes the handler's share of its config load's zones (nil
// outside a config load: a bare context has no metrics registry) and
// describes where the handler is, for errors.
func (h *Handler) provisionLoad(ctx caddy.Context) (*loadZones, string, error) {
	reg := ctx.GetMetricsRegistry()
	if reg == nil {
		return nil, "", nil
	}
	key := loadKey{reg}
	v, _, err := pool.LoadOrNew(key, func() (caddy.Destructor, error) {
		return &loadZones{zones: make(map[string]zoneDefinition)}, nil
	})
	if err != nil {
		return nil, "", err
	}
	h.rt.poolKeys = append(h.rt.poolKeys, key)
	lz := v.(*loadZones)
	return lz, placeOf(ctx, lz.next()), nil
}

// placeOf describes the n-th rate_limit handler of a config load: its
// order, its server (name and listen addresses) and its site (the matchers
// of the server's top-level route that holds it, e.g. a Caddyfile site's
// host matcher).
func placeOf(ctx caddy.Context, n int) string {
	place := fmt.Sprintf("rate_limit handler #%d", n)
	srv, ok := ctx.Context.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if !ok || srv == nil {
		return place
	}
	place += fmt.Sprintf(" (server %q listening on %s", srv.Name(), strings.Join(srv.Listen, " "))
	if site := siteOf(srv.Routes); site != "" {
		place += ", site " + site
	}
	return place + ")"
}

// siteOf describes the matchers of the route of routes whose handlers are
// being provisioned: Caddy provisions the routes in order, and a route's
// HandlersRaw is consumed (and Handlers set) once all its handlers are
// provisioned, so it is the first route with raw handlers but no handlers
// yet. "" if there is none or it has no matchers.
func siteOf(routes caddyhttp.RouteList) string {
	for i := range routes {
		r := &routes[i]
		if r.Handlers != nil || len(r.HandlersRaw) == 0 {
			continue
		}
		var sets []string
		for _, set := range r.MatcherSets {
			var ms []string
			for _, m := range set {
				name := fmt.Sprintf("%T", m)
				if mod, ok := m.(caddy.Module); ok {
					name = mod.CaddyModule().ID.Name()
				}
				j, err := json.Marshal(m)
				if err != nil {
					j = []byte("?")
				}
				ms = append(ms, name+" "+string(j))
			}
			sets = append(sets, strings.Join(ms, " "))
		}
		return strings.Join(sets, " or ")
	}
	return ""
}
