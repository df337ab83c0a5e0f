package ratelimit

import (
	"sync"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// runningZones are the zones of a config load, one per name (the handlers
// that name a zone share its stores), in the order they were provisioned.
type runningZones struct {
	mu    sync.Mutex
	names []string
	zones map[string]runningZone
}

// runningZone is a zone and the name of its store: memory, redis, or
// redis_sync (the two-layer store of sync_interval).
type runningZone struct {
	*zone
	store string
}

func (rz *runningZones) add(z *zone, storeName string) {
	rz.mu.Lock()
	defer rz.mu.Unlock()
	if rz.zones == nil {
		rz.zones = make(map[string]runningZone)
	}
	if _, ok := rz.zones[z.name]; !ok {
		rz.zones[z.name] = runningZone{zone: z, store: storeName}
		rz.names = append(rz.names, z.name)
	}
}

// list returns the zones in order.
func (rz *runningZones) list() []runningZone {
	rz.mu.Lock()
	defer rz.mu.Unlock()
	out := make([]runningZone, len(rz.names))
	for i, n := range rz.names {
		out[i] = rz.zones[n]
	}
	return out
}

// get returns the zone named name, or nil.
func (rz *runningZones) get(name string) *zone {
	rz.mu.Lock()
	defer rz.mu.Unlock()
	return rz.zones[name].zone
}

// running returns the zones of the config load Caddy runs (none when it
// has no rate_limit handler). That is not always the router's own load:
// Caddy starts the admin endpoint of a new load before provisioning the
// load's apps, so during a reload the old config still runs, and after a
// reload that fails the old config keeps running while the new load's
// router stays. The router's own load is taken only when no config runs
// (a router provisioned outside Caddy's config loading).
func (a *AdminAPI) running() *runningZones {
	reg := a.activeRegistry()
	if reg == nil {
		reg = a.reg
	}
	var rz *runningZones
	if reg != nil {
		pool.Range(func(k, v any) bool {
			if lk, ok := k.(loadKey); ok && lk.reg == reg {
				rz = &v.(*loadZones).running
				return false
			}
			return true
		})
	}
	if rz == nil {
		return new(runningZones)
	}
	return rz
}

// activeRegistry is the metrics registry of the config load Caddy runs,
// which identifies its zones (see loadKey); nil when none runs.
func (a *AdminAPI) activeRegistry() *prometheus.Registry {
	if a.active != nil {
		return a.active()
	}
	ctx := caddy.ActiveContext()
	return ctx.GetMetricsRegistry()
}

// listZones answers GET /rate_limit/zones.
func (a *AdminAPI) listZones() adminZones {
	zs := a.running().list()
	out := adminZones{Zones: make([]adminZone, 0, len(zs))}
	for _, z := range zs {
		az := adminZone{Name: z.name, Store: z.store, Algorithm: z.algorithm}
		for _, t := range z.tiers {
			az.Tiers = append(az.Tiers, adminTier{Events: t.Events, Window: t.Window.String()})
		}
		if l, ok := z.zone.store.(interface{ Len() int }); ok {
			n := l.Len()
			az.Keys = &n
		}
		out.Zones = append(out.Zones, az)
	}
	return out
}
