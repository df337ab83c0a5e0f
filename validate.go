package ratelimit

import (
	"errors"
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/redisstore"
)

// Validate checks the configuration as a whole: every zone on its own
// (options in range, options that apply to the zone's algorithm, tiers
// the algorithm accepts) and the handler's options, and that zone names are
// unique. It implements caddy.Validator and accepts a configuration before
// and after Provision has filled in the defaults.
func (h *Handler) Validate() error {
	if len(h.Zones) == 0 {
		return errors.New("no zones: at least one zone (a key and a limit) is required")
	}
	seen := make(map[string]int, len(h.Zones))
	for i, z := range h.Zones {
		if z == nil {
			return fmt.Errorf("zone %d: empty (null) zone", i+1)
		}
		if err := z.validate(); err != nil {
			if z.Name == "" {
				return fmt.Errorf("zone %d: %v", i+1, err)
			}
			return fmt.Errorf("zone %q: %v", z.Name, err)
		}
		if j, dup := seen[z.Name]; dup {
			return fmt.Errorf("duplicate zone name %q (zones %d and %d): zone names must be unique", z.Name, j+1, i+1)
		}
		seen[z.Name] = i
	}
	if err := h.checkPolicyNames(); err != nil {
		return err
	}
	return h.validateOptions()
}

// checkPolicyNames refuses zones whose RateLimit-Policy names (one per tier,
// see policyNames) collide: a zone named "a-1m" beside a zone "a" with a
// tier of 1m would make the headers name two policies alike.
func (h *Handler) checkPolicyNames() error {
	owner := make(map[string]string)
	for _, z := range h.Zones {
		tiers := make([]algorithms.Tier, len(z.Limits))
		for i, l := range z.Limits {
			tiers[i] = algorithms.Tier{Events: l.Events, Window: time.Duration(l.Window)}
		}
		for _, name := range policyNames(z.Name, tiers) {
			if other, dup := owner[name]; dup {
				return fmt.Errorf("zones %q and %q both have a tier named %q in the RateLimit headers: rename one of the zones", other, z.Name, name)
			}
			owner[name] = z.Name
		}
	}
	return nil
}

// validateOptions checks the handler's own options (everything but the
// zones).
func (h *Handler) validateOptions() error {
	if err := storeEnum.check(h.Store); err != nil {
		return &zoneError{option: "store", err: err}
	}
	if err := headersEnum.check(h.Headers); err != nil {
		return &zoneError{option: "headers", err: err}
	}
	if h.Status != 0 {
		if err := checkStatus(h.Status); err != nil {
			return &zoneError{option: "status", err: err}
		}
	}
	if err := checkJitter(h.Jitter); err != nil {
		return &zoneError{option: "jitter", err: err}
	}
	if err := checkFloor("sweep_interval", time.Duration(h.SweepInterval)); err != nil {
		return err
	}
	if h.MaxKeys < 0 {
		return zoneErrf("max_keys", "max_keys must not be negative, got %d", h.MaxKeys)
	}
	return h.validateRedisOptions()
}

// validateRedisOptions checks the options of the redis store: they need
// store redis, and sync_interval needs counter algorithms. With store redis
// it also refuses the options that would be ignored there.
func (h *Handler) validateRedisOptions() error {
	if err := onErrorEnum.check(h.OnError); err != nil {
		return &zoneError{option: "on_error", err: err}
	}
	redisStore := h.onRedis()
	if !redisStore {
		switch {
		case h.Redis != nil:
			return zoneErrf("redis", "redis settings need store redis (add: store redis)")
		case h.SyncInterval != 0:
			return zoneErrf("sync_interval", "sync_interval applies only to store redis")
		case h.Lease != 0:
			return zoneErrf("lease", "lease applies only to store redis")
		case h.OnError != "":
			return zoneErrf("on_error", "on_error applies only to store redis (the memory store cannot fail)")
		}
		return nil
	}
	if h.Redis != nil {
		if err := h.Redis.validate(); err != nil {
			return &zoneError{option: "redis", err: err}
		}
	}
	if err := checkFloor("sync_interval", time.Duration(h.SyncInterval)); err != nil {
		return err
	}
	if err := h.checkRedisIgnored(); err != nil {
		return err
	}
	if err := h.validateLease(); err != nil {
		return err
	}
	if h.SyncInterval > 0 {
		for _, z := range h.Zones {
			if z.limitsFromRequest() {
				return zoneErrf("sync_interval", "zone %q: sync_interval does not work with limits from placeholders (each instance's local counts hold one limit)", z.Name)
			}
			if ok, summable := algorithms.Summable(z.Algorithm); !ok {
				alg := z.Algorithm
				if alg == "" {
					alg = algorithms.Default + " (the default)"
				}
				return zoneErrf("sync_interval", "zone %q: sync_interval works with algorithm %s (counts that can be summed), not %s",
					z.Name, summable, alg)
			}
		}
	}
	return nil
}

// validateLease checks lease (store redis): a positive duration, not with
// sync_interval, and zones whose algorithm a lease charges exactly, without
// count_rejected (a denial decided locally is not counted in Redis).
func (h *Handler) validateLease() error {
	if h.Lease == 0 {
		return nil
	}
	if err := checkFloor("lease", time.Duration(h.Lease)); err != nil {
		return err
	}
	if h.SyncInterval != 0 {
		return zoneErrf("lease", "lease and sync_interval are two ways of deciding locally: choose one")
	}
	for _, z := range h.Zones {
		alg := z.Algorithm
		if alg == "" {
			alg = algorithms.Default
		}
		if err := redisstore.CheckLease(alg, z.CountRejected); err != nil {
			return zoneErrf("lease", "zone %q: %v", z.Name, err)
		}
		if z.limitsFromRequest() {
			return zoneErrf("lease", "zone %q: lease does not work with limits from placeholders (a lease is charged under one limit)", z.Name)
		}
		if z.BlockFor != 0 {
			return zoneErrf("lease", "zone %q: lease does not apply with block_for: a key admitted from a lease in hand is not checked against its block", z.Name)
		}
	}
	return nil
}

// checkRedisIgnored refuses, with store redis, the options that the store
// would ignore. The values Provision fills in pass: Validate runs again
// after Provision.
func (h *Handler) checkRedisIgnored() error {
	onError := onErrorEnum.mode(h.OnError)
	if h.SyncInterval > 0 && onError != onErrorOpen {
		return zoneErrf("on_error", "on_error %s does not apply with sync_interval: decisions are made on local counts and never wait on Redis (a failed push is retried at the next interval)", h.OnError)
	}
	// With store redis the memory store is the on_error local fallback,
	// and (max_keys only) the local counts of sync_interval.
	local := onError == onErrorLocal
	if h.SweepInterval != 0 && time.Duration(h.SweepInterval) != defaultSweepInterval && !local {
		return zoneErrf("sweep_interval", "sweep_interval applies to keys held in memory: with store redis only with on_error local")
	}
	if h.MaxKeys != 0 && h.MaxKeys != defaultMaxKeys && !local && h.SyncInterval == 0 && h.Lease == 0 {
		return zoneErrf("max_keys", "max_keys applies to keys held in memory: with store redis only with on_error local or sync_interval, or lease")
	}
	return nil
}

// Interface guard.
var _ caddy.Validator = (*Handler)(nil)
