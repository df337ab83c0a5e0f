// Package redisstore is the Redis store of caddy-ratelimit: one Lua script per
// algorithm (the Redis twin of each Go algorithm in package algorithms),
// embedded with go:embed and run with EVALSHA (loaded again on NOSCRIPT), and the
// Store that runs them through a go-redis UniversalClient (one node,
// Cluster or Sentinel). Around it: Client, the client the stores of a
// Redis share with its circuit breakers (one per master on a Cluster),
// their probes and the Pipeliner; DenyCache, a
// Store that answers a key denied again before its Retry-After without a
// round trip; SyncStore, the two-layer store of sync_interval, whose
// model and over-admission bound are in TWO_LAYER.md; and LeaseStore, the
// leasing store of lease (never over the limit; LEASE.md).
//
// # One command per decision
//
// Take sends exactly one EVALSHA: the script decides every tier of the zone
// atomically and answers every field of the Decision. Undo (a later zone
// denied the request, or a concurrency request ended) is one more EVALSHA of
// the same script in undo mode; it is skipped when there is nothing to give
// back.
//
// # Time
//
// Take and Undo with a zero now let the script read Redis's TIME, so that
// the instances sharing a count never depend on their own clocks; tests
// pass an instant in (now.UnixMicro()). Reading TIME in a script that then
// writes is allowed because Redis (5 and later; 7 always) replicates a
// script's effects, not the script itself.
//
// # Key layout
//
// Every key of one zone key is
//
//	<key_prefix><zone>:{<escaped key>}:<alg>:<config digest>[:<part>]
//
// The braces are the Cluster hash tag: all keys of one zone key live in one
// slot, so a script never gets CROSSSLOT. The user's key is escaped by
// EscapeKey ('{', '}', '%', space and control bytes become %XX; an escaped key
// longer than MaxEscapedKey bytes is replaced by "%H" + its hex SHA-256; the
// empty key is "%Z", since "{}" would be no hash tag at all), so it can
// never inject a brace or a newline, and the user's part of a key name is
// at most MaxEscapedKey bytes. The zone name is escaped the same way (it
// precedes the hash tag), and a key_prefix may not contain a brace. The
// config digest (8 hex digits of a SHA-256 of the algorithm and the layout
// of its state) leaves the limits out: a key keeps its state when they
// change, and each call's script interprets it under the call's limits
// (Store.Under), as the memory store does.
//
// Keys per zone key and algorithm:
//
//	sliding_log     <...>:sl:<d>:m      string: latest instant seen, per tier the
//	                                    live units and the newest unit's offset
//	                <...>:sl:<d>:<i>    sorted set of tier i's runs (one per Take),
//	                                    scored by the offset of their newest unit
//	sliding_window  <...>:sw:<d>        string: per tier window start and counts
//	fixed_window    <...>:fw:<d>        string: per tier window start and count
//	token_bucket    <...>:tb:<d>        string: last instant, per tier the level
//	                                    and the rate, scale and cap it was saved under
//	leaky_bucket    <...>:lb:<d>        string: the same as token_bucket
//	gcra            <...>:gcra:<d>      string: last instant, per tier the TAT
//	                                    and the interval and tau it was saved under
//	concurrency     <...>:cc:<d>        hash: last instant, last token, held,
//	                                    newest tombstone's expiry
//	                <...>:cc:<d>:l      sorted set of leases (and tombstones)
//	                                    scored by expiry
//
// A string state is decimal integers separated by spaces, read with the
// key's block by one MGET and written with its TTL by one SET PX
// (load_blocked and save_state in lib.lua): fewer commands than a hash, and
// each command inside a script costs Redis 3,000-10,000 instructions.
//
// Every call sets a TTL on every key it touches: the time until the
// state is the same as a fresh one, plus a one-second margin (Margin), so
// Redis never fills with dead keys and a crashed instance's concurrency
// leases expire on their own:
//
//	sliding_log     newest event + window - now          <= longest window
//	fixed_window    end of the current window - now      <= longest window
//	sliding_window  end of the next window - now         <= 2 x longest window
//	                (the current count weighs on the next window)
//	token_bucket    time until full                      <= burst/rate
//	leaky_bucket    time until empty                     <= burst/rate
//	gcra            TAT - now                            <= burst/rate
//	                (the buckets up to twice that with count_rejected debt)
//	concurrency     newest lease's expiry - now          <= window
//
// (burst/rate is the window when burst is the default, events.)
//
// # Unique members
//
// Sorted-set members are unique even for requests in the same microsecond:
// a sliding_log run (one per logged Take, whatever its cost) is
// "<µs>:<units>:<instance id>-<store id>-<counter>" (the id: a random
// per-process id, a per-process store number and a per-store atomic
// counter, in base 36, passed in by the Store; see sliding_log.lua for the
// score); a
// concurrency lease is "<token>:<cost>", where the token is made by the
// Store (a random per-Store start in [2^52, 2^52+2^51) plus a counter:
// unique across instances and exact in Lua's doubles), not drawn in the
// script as the Go twin draws it: a Take whose answer was lost can then be
// forgotten by its token (see concurrency.lua).
package redisstore
