package algorithms

import (
	"fmt"
	"slices"
	"strings"
)

// Algorithm is an entry of the registry: an algorithm's name, its
// constructor, and what configurations, stores and the handler need to know
// about it. Each algorithm registers itself in its own file.
type Algorithm struct {
	// Name is the algorithm's name as written in the Caddyfile and JSON.
	Name string

	// New returns the Limiter for a Config that New (the package
	// function) has checked against the facts below.
	New func(Config) (Limiter, error)

	// Burst: the algorithm has a bucket capacity, Config.Burst. The others
	// refuse a Burst.
	Burst bool

	// Summable: its state per tier is one count per window aligned to the
	// Unix epoch, which instances can add up (the two-layer store of
	// sync_interval).
	Summable bool

	// OneTier, when set, is what the algorithm's single tier means; it
	// refuses more than one.
	OneTier string

	// NoCountRejected, when set, is why Config.CountRejected does not
	// apply; it is refused.
	NoCountRejected string

	// Lease: an admission holds until the request ends, when the handler
	// gives it back with State.Undo.
	Lease bool

	// Delay: an admitted Decision may carry a Delay (traffic shaping with
	// on_limit wait).
	Delay bool

	// rank orders Names: the default is 0.
	rank int
}

// Default is the algorithm of a zone that names none.
const Default = SlidingLog

// registry holds the registered algorithms by name. It is filled by the
// algorithms' init functions and only read afterwards.
var registry = map[string]Algorithm{}

// Names lists the registered algorithms, the default first. It is filled
// with the registry; do not modify it.
var Names []string

// register adds a to the registry. Called from init functions only.
func register(a Algorithm) {
	if _, dup := registry[a.Name]; dup || a.Name == "" || a.New == nil {
		panic(fmt.Sprintf("algorithms: bad or duplicate registration %q", a.Name))
	}
	registry[a.Name] = a
	Names = append(Names, a.Name)
	slices.SortFunc(Names, func(x, y string) int { return registry[x].rank - registry[y].rank })
}

// Lookup returns the registered algorithm named (empty means Default), or
// an error naming the algorithms there are.
func Lookup(name string) (Algorithm, error) {
	if name == "" {
		name = Default
	}
	a, ok := registry[name]
	if !ok {
		return a, fmt.Errorf("unknown algorithm %q (want one of %s)", name, strings.Join(Names, ", "))
	}
	return a, nil
}

// New returns the Limiter for algorithm name (empty means Default) with
// cfg, or an error naming what is wrong with cfg for that algorithm (a
// *ConfigError when it is a part of cfg).
func New(name string, cfg Config) (Limiter, error) {
	a, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	if err := a.check(cfg); err != nil {
		return nil, err
	}
	return a.New(cfg)
}

// Check returns the error New would for algorithm name and cfg, without
// building the Limiter: for a store handed a Limiter that New may not have
// built.
func Check(name string, cfg Config) error {
	a, err := Lookup(name)
	if err != nil {
		return err
	}
	return a.check(cfg)
}

// check refuses what cfg holds that a does not take.
func (a Algorithm) check(cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	if a.OneTier != "" && len(cfg.Tiers) != 1 {
		// At fault: the first tier beyond the one it takes.
		return &ConfigError{Field: "tiers", Tier: min(len(cfg.Tiers)-1, 1), Err: fmt.Errorf("algorithm %s takes exactly one limit (%s), got %d", a.Name, a.OneTier, len(cfg.Tiers))}
	}
	if cfg.Burst != 0 && !a.Burst {
		return &ConfigError{Field: "burst", Tier: -1, Err: fmt.Errorf("burst applies only to algorithms %s, not %s", NamesWhere(func(b Algorithm) bool { return b.Burst }, " and "), a.Name)}
	}
	if cfg.CountRejected && a.NoCountRejected != "" {
		return &ConfigError{Field: "count_rejected", Tier: -1, Err: fmt.Errorf("count_rejected does not apply to algorithm %s (%s)", a.Name, a.NoCountRejected)}
	}
	return nil
}

// UsesBurst reports whether the algorithm named has a bucket capacity.
func UsesBurst(name string) bool {
	a, err := Lookup(name)
	return err == nil && a.Burst
}

// Capacity is the most units a tier of events admits at once under the
// algorithm named: its burst when it has a bucket capacity and burst is
// set, else events.
func Capacity(events, burst int64, name string) int64 {
	if burst > 0 && UsesBurst(name) {
		return burst
	}
	return events
}

// Summable reports whether the counts of the algorithm named can be added
// up across instances (sync_interval), and lists those that can, for
// messages: "sliding_window or fixed_window".
func Summable(name string) (ok bool, all string) {
	a, err := Lookup(name)
	return err == nil && a.Summable, NamesWhere(func(b Algorithm) bool { return b.Summable }, " or ")
}

// NamesWhere lists the algorithms for which keep holds, in the order of
// Names, for messages: "a, b<last>c". A store lists the algorithms it takes
// with it, from its own facts.
func NamesWhere(keep func(Algorithm) bool, last string) string {
	var ns []string
	for _, n := range Names {
		if keep(registry[n]) {
			ns = append(ns, n)
		}
	}
	if len(ns) < 2 {
		return strings.Join(ns, "")
	}
	return strings.Join(ns[:len(ns)-1], ", ") + last + ns[len(ns)-1]
}

// limiter is what every Limiter holds: its algorithm's name and its own
// copy of the Config.
type limiter struct {
	name string
	cfg  Config
}

// newLimiter copies cfg so that the caller cannot change a Limiter's tiers
// afterwards.
func newLimiter(name string, cfg Config) limiter {
	cfg.Tiers = append([]Tier(nil), cfg.Tiers...)
	return limiter{name: name, cfg: cfg}
}

func (l *limiter) Name() string   { return l.name }
func (l *limiter) Config() Config { return l.cfg }
