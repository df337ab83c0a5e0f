#!/usr/bin/env bash
# Admission accuracy: how closely rate_limit holds its limit under load.
#
# Builds ./cmd/caddy and ./bench/accuracy, starts one redis-server and three
# Caddy instances (all on 127.0.0.1; each serves one route per algorithm and
# mode, from `accuracy caddyfile`), then `accuracy run` drives them with an
# open-loop load (requests at fixed instants, whatever the answers) at
# RATES times the limit, DURATION per run, one run after the other: the
# memory store on the first instance, the Redis modes spread over all three.
# It prints a line per run, and writes the table (results.md) and the plots
# (one SVG per algorithm, modes.svg) to OUT. Everything started is stopped
# on exit (Caddy's logs are kept in bench/results/). A full run takes about
# 7 minutes on 2 cores.
#
#   bash bench/accuracy.sh                  # full run, into docs/accuracy
#   QUICK=1 bash bench/accuracy.sh          # 2 s runs, into bench/results/accuracy
#                                           # (as any run with other settings)
#   ONLY=gcra,redis bash bench/accuracy.sh  # some algorithms or modes only
#   CADDY=/path/to/caddy bash bench/accuracy.sh  # measure that Caddy instead of building ./cmd/caddy
#                                           # (CADDY_NOTE: what it is, for the results)
#   LEASE=200ms bash bench/accuracy.sh      # the leased mode's `lease` (run when Caddy has the option)
#   LEASED_OPTION='' bash bench/accuracy.sh # no leased mode; or other handler options for it
#
# Other load on the machine delays the load generator and Redis's replies:
# the load average at the start and end is recorded with the results.
set -euo pipefail

EVENTS=${EVENTS:-100}
WINDOW=${WINDOW:-1s}
RATES=${RATES:-0.5,1,4}
SYNC_INTERVAL=${SYNC_INTERVAL:-200ms}
# The leased mode's lease: well under what a bucket refills in (burst / rate,
# 1 s here), since a bucket lends only what a lease cannot outlast.
LEASE=${LEASE:-100ms}
if [ -n "${QUICK:-}" ]; then
	DURATION=${DURATION:-2s}
else
	DURATION=${DURATION:-6s}
fi
# Only a full run with the defaults replaces the published results.
if [ -z "${QUICK:-}${ONLY:-}${CADDY:-}" ] && [ "$RATES,$DURATION,$EVENTS,$WINDOW,$SYNC_INTERVAL" = "0.5,1,4,6s,100,1s,200ms" ]; then
	OUT=${OUT:-docs/accuracy}
else
	OUT=${OUT:-bench/results/accuracy}
fi

# redis-server on any core: pinned to one, it waits whenever other work
# on the machine takes that core, and its replies time out.
REDIS_CPU=${REDIS_CPU:-0-$(($(nproc) - 1))}
BENCH=accuracy
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need go
need redis-server redis-server
workdir=$(mktemp -d "${TMPDIR:-/tmp}/accuracy.XXXXXX")
on_exit "rm -rf '$workdir'"
# Caddy's logs (Redis failures, for instance) outlive the run.
mkdir -p bench/results
on_exit "cp '$workdir'/caddy.*.log bench/results/ 2>/dev/null"

if [ -n "${CADDY:-}" ]; then
	echo "accuracy: building ./bench/accuracy; Caddy is $CADDY"
	cp "$CADDY" "$workdir/caddy"
else
	echo "accuracy: building ./cmd/caddy and ./bench/accuracy"
	go build -o "$workdir/caddy" ./cmd/caddy
fi
go build -o "$workdir/accuracy" ./bench/accuracy

start_redis
# The leased mode runs when this Caddy has the `lease` option.
if [ -z "${LEASED_OPTION+set}" ]; then
	printf '{\n\tadmin off\n}\n:0 {\n\trate_limit {\n\t\tzone z {\n\t\t\tlimit 1 1s\n\t\t}\n\t\tstore redis\n\t\tlease %s\n\t}\n}\n' \
		"$LEASE" >"$workdir/lease.Caddyfile"
	if "$workdir/caddy" adapt --config "$workdir/lease.Caddyfile" --adapter caddyfile >/dev/null 2>&1; then
		LEASED_OPTION="lease $LEASE"
	else
		echo "accuracy: this Caddy has no lease option: the leased mode is skipped"
	fi
fi
flags=(-events "$EVENTS" -window "$WINDOW" -redis "$REDIS_ADDR" -sync-interval "$SYNC_INTERVAL" -leased "${LEASED_OPTION:-}")
# start_caddy I: starts Caddy instance I on a free port and appends the port
# to ports. Another process may take the port between free_port and Caddy's
# bind, so it tries three ports before giving up.
ports=()
start_caddy() {
	local i=$1 port cf pid attempt
	cf="$workdir/Caddyfile.$i"
	for attempt in 1 2 3; do
		port=$(free_port)
		"$workdir/accuracy" caddyfile -port "$port" "${flags[@]}" >"$cf"
		if launch "$cf" "$workdir/caddy.$i.log" 30 "$port" -- \
			"$workdir/caddy" run --config "$cf" --adapter caddyfile; then
			ports+=("$port")
			return 0
		fi
	done
	die "Caddy $i did not start"
}
for i in 1 2 3; do start_caddy "$i"; done
echo "accuracy: Caddy on ports ${ports[*]}, redis-server on $REDIS_ADDR"

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
stamp=$(date -u +%Y%m%dT%H%M%SZ)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
note="bench/accuracy.sh $stamp, commit $commit${CADDY:+ (Caddy: ${CADDY_NOTE:-$CADDY})}, $(nproc) cores ($cpu), $(go version | cut -d' ' -f3), $DURATION per run, sync_interval $SYNC_INTERVAL${LEASED_OPTION:+, leased mode: $LEASED_OPTION}; load average at the start $load_start (other processes share the machine)."
echo "accuracy: $note"
"$workdir/accuracy" run "${flags[@]}" -ports "$(IFS=,; echo "${ports[*]}")" -duration "$DURATION" -rates "$RATES" \
	-out "$OUT" -note "$note" -only "${ONLY:-}" | tee "bench/results/accuracy-$stamp.txt"
load_end=$(cut -d' ' -f1-3 /proc/loadavg)
printf '\nLoad average at the end: %s.\n' "$load_end" >>"$OUT/results.md"
echo "accuracy: load average at the end $load_end; results in $OUT and bench/results/accuracy-$stamp.txt"
