#!/usr/bin/env bash
# What a wait in the middle of a request costs a Go HTTP server, with no
# rate limiter and no network behind the wait: bench/waitcost (a bare
# net/http server) pinned to core 0, driven by wrk on core 1 like
# bench/e2e.sh's Caddy. Its CPU per request on three paths, the rounds
# interleaved: /now answers at once, /alone blocks until a helper
# goroutine answers it, /batch waits in a batch that a helper answers at
# once (as a Redis call waits in a pipeline's batch). now_ratio is /now's
# CPU per request over the path's, as e2e.sh's cpu_ratio is plain Caddy's.
#
#   bash bench/waitcost.sh
#   ROUNDS=7 DURATION=6s CONNECTIONS=200 bash bench/waitcost.sh
set -euo pipefail

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-4s}
CONNECTIONS=${CONNECTIONS:-50}

BENCH=waitcost
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need go
need taskset
need wrk wrk

workdir=$(mktemp -d "${TMPDIR:-/tmp}/waitcost.XXXXXX")
on_exit "rm -rf '$workdir'"
go build -o "$workdir/waitcost" ./bench/waitcost

port=$(free_port)
taskset -c "$CADDY_CPU" "$workdir/waitcost" -addr "127.0.0.1:$port" >"$workdir/log" 2>&1 &
pid=$!
on_exit "kill $pid 2>/dev/null; wait $pid 2>/dev/null"
wait_port "$port" 10 || { cat "$workdir/log" >&2; die "waitcost did not start"; }

echo "waitcost: load average $(cut -d' ' -f1-3 /proc/loadavg) at the start; $ROUNDS rounds of $DURATION, wrk -c$CONNECTIONS"
paths=(now alone batch)
declare -A CPU=() SYS=()
for ((r = 1; r <= ROUNDS; r++)); do
	for p in "${paths[@]}"; do
		taskset -c "$WRK_CPU" wrk -t1 -c"$CONNECTIONS" -d1s "http://127.0.0.1:$port/$p" >/dev/null
		c0=$(proc_ticks "$pid") s0=$(proc_sys_ticks "$pid")
		n=$(taskset -c "$WRK_CPU" wrk -t1 -c"$CONNECTIONS" -d"$DURATION" "http://127.0.0.1:$port/$p" |
			awk '/requests in/ { print $1 }')
		c1=$(proc_ticks "$pid") s1=$(proc_sys_ticks "$pid")
		[ -n "$n" ] && [ "$n" -gt 0 ] || die "wrk got no answers from /$p (see $workdir/log)"
		CPU[$p]+=" $(tick_us $((c1 - c0)) "$n" 2)"
		SYS[$p]+=" $(tick_us $((s1 - s0)) "$n" 2)"
	done
done

now=$(median_of "${CPU[now]}")
printf '%-6s %8s %8s %9s   %s\n' path cpu_us sys_us now_ratio "rounds (cpu_us)"
for p in "${paths[@]}"; do
	c=$(median_of "${CPU[$p]}")
	printf '%-6s %8s %8s %9.3f  %s\n' "$p" "$c" "$(median_of "${SYS[$p]}")" "$(awk -v a="$now" -v b="$c" 'BEGIN { print a / b }')" "${CPU[$p]}"
done
echo "waitcost: load average $(cut -d' ' -f1-3 /proc/loadavg) at the end; CPU model: $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)"
