package ratelimit

import (
	"fmt"
	"strings"
)

// enum is an enumerated option: the values it accepts, in the order
// messages list them, each with the mode the code switches on, and the
// value that an option left out (the empty string) means. Validate checks
// a value with check, Provision fills in def and switches on mode, and the
// Caddyfile parser shows usage.
type enum[M any] struct {
	option string
	values []enumValue[M]
	def    string
	// noun names the option in "unknown <noun> %q" (default: "<option>
	// value").
	noun string
}

type enumValue[M any] struct {
	name string
	mode M
}

// check accepts a value of the enumeration, and "" (the default).
func (e *enum[M]) check(v string) error {
	if v == "" {
		return nil
	}
	if _, ok := e.lookup(v); ok {
		return nil
	}
	noun := e.noun
	if noun == "" {
		noun = e.option + " value"
	}
	return fmt.Errorf("unknown %s %q (want one of %s)", noun, v, e.join(", "))
}

func (e *enum[M]) lookup(v string) (M, bool) {
	for _, ev := range e.values {
		if ev.name == v {
			return ev.mode, true
		}
	}
	var zero M
	return zero, false
}

// orDefault is v, or the default when v is empty.
func (e *enum[M]) orDefault(v string) string {
	if v == "" {
		return e.def
	}
	return v
}

// mode is the mode of v ("" is the default); Validate has refused any
// other value.
func (e *enum[M]) mode(v string) M {
	m, _ := e.lookup(e.orDefault(v))
	return m
}

// storeKind is where a handler's limit state lives.
type storeKind uint8

const (
	storeMemory storeKind = iota // this instance's own counts
	storeRedis                   // one count shared by every instance
)

// onRedis reports whether the handler's store is Redis.
func (h *Handler) onRedis() bool { return storeEnum.mode(h.Store) == storeRedis }

// usage is the values as a Caddyfile syntax line shows them: "a | b".
func (e *enum[M]) usage() string { return e.join(" | ") }

func (e *enum[M]) join(sep string) string {
	names := make([]string, len(e.values))
	for i, ev := range e.values {
		names[i] = ev.name
	}
	return strings.Join(names, sep)
}

// The enumerated options. Their tables are never modified.
var (
	storeEnum = &enum[storeKind]{option: "store", noun: "store", def: "memory",
		values: []enumValue[storeKind]{{"memory", storeMemory}, {"redis", storeRedis}}}

	onErrorEnum = &enum[onErrorMode]{option: "on_error", def: "open",
		values: []enumValue[onErrorMode]{{"open", onErrorOpen}, {"closed", onErrorClosed}, {"local", onErrorLocal}}}

	headersEnum = &enum[headerMode]{option: "headers", def: "both",
		values: []enumValue[headerMode]{{"ietf", headersIETF}, {"legacy", headersLegacy}, {"both", headersBoth}, {"off", headersOff}}}

	// onLimitEnum's mode is whether a request over the limit waits.
	onLimitEnum = &enum[bool]{option: "on_limit", def: "reject",
		values: []enumValue[bool]{{"reject", false}, {"wait", true}}}

	emptyKeyEnum = &enum[emptyKeyMode]{option: "empty_key", def: "global",
		values: []enumValue[emptyKeyMode]{{"allow", emptyKeyAllow}, {"deny", emptyKeyDeny}, {"global", emptyKeyGlobal}}}
)
