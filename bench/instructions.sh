#!/usr/bin/env bash
# Instructions per request, counted by valgrind's callgrind: a measure of
# CPU cost that other load on the machine does not move (throughput, in
# bench/e2e.sh, varies by 20 % from round to round on a shared VM).
#
#   bash bench/instructions.sh          # both parts
#   bash bench/instructions.sh caddy    # Caddy's user-space instructions per request, per site
#   bash bench/instructions.sh lua      # redis-server's instructions per EVALSHA, per algorithm
#   bash bench/instructions.sh pipeline # the client's instructions per Take through the direct Pipeliner
#
# caddy: ./cmd/caddy under callgrind, one Caddy per site
# (GODEBUG=asyncpreemptoff=1: callgrind asserts on Go's preemption signal;
# cpu.rdtscp=off: valgrind cannot run the RDTSCP instruction Go's runtime
# uses on AMD processors, and Go then reads the time another way), for
# e2e.sh's memory scenarios, redis_pass and leased (their redis-server runs
# natively), and three of its own (bench/lib.sh): pass_headers_off,
# noop_handler and error_headers_reference; for each, a warm-up, then wrk
# for DURATION (default 8s) with CONNS connections (default 16: enough
# requests in flight that the Redis store's pipelines batch), with the
# counters zeroed before and dumped after (SITES="plain pass redis_pass"
# counts only those). User space only (the
# kernel's share of a request is not counted), and garbage collection falls
# where it falls: repeat a run to see the spread (2-4 % here). With GOGC=off
# in the environment (Caddy inherits it) the collector does not run, and a
# site repeats to about 0.5 %: the way to compare what one handler adds to
# a memory site (its allocations are then counted, not what collecting
# them costs; plain Caddy spends about a third of its instructions there).
#
# lua: one redis-server under callgrind; for each algorithm, N decisions
# (default 2000, one connection, 1,000 keys) made by the Redis store itself
# (bench/luacalls: the script as sent, with the lib.lua functions it uses,
# its keys and arguments), one tier whose limit is never reached, counters
# zeroed before and dumped after. Exact to a few instructions from run to
# run. ALGS="gcra token_bucket" counts only those.
#
# pipeline: BenchmarkRedisPipeline's direct Pipeliner (./redisstore/, -cpu 1)
# under callgrind, 1, 8, 32 and 128 Takes in flight, TAKES (default 20000)
# each: the instructions of the measured loop (callgrind dumps when the
# benchmark reads its CPU time before and after it) per Take, the
# redis-server (a child process) not counted. What a Take costs the client
# at each batch size, without the scheduling noise of a shared machine.
#
# Results are written to bench/results/ (gitignored).
set -euo pipefail

DURATION=${DURATION:-8s}
CONNS=${CONNS:-16}
N=${N:-2000}
TAKES=${TAKES:-20000}

BENCH=instructions
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
workdir=$(mktemp -d "${TMPDIR:-/tmp}/instructions.XXXXXX")
on_exit "rm -rf '$workdir'"

need valgrind valgrind
need callgrind_control valgrind

# dump_total OUT: dump the counters of the callgrind writing OUT.* and print
# the instructions since they were last zeroed.
dump_total() {
	local before after last
	before=$( (ls "$1".* 2>/dev/null || true) | wc -l)
	callgrind_control -d "$2" >/dev/null 2>&1
	for _ in $(seq 100); do
		after=$( (ls "$1".* 2>/dev/null || true) | wc -l)
		[ "$after" -gt "$before" ] && break
		sleep 0.1
	done
	sleep 0.3
	last=$(ls -t "$1".* | head -1)
	awk '/^(summary|totals):/ { print $2; exit }' "$last"
}

mkdir -p bench/results
result=bench/results/instructions-$(date -u +%Y%m%dT%H%M%SZ).txt
{
	echo "# bench/instructions.sh $(date -u +%Y%m%dT%H%M%SZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
	echo "# $(go version | cut -d' ' -f3-), valgrind $(valgrind --version)"
} >"$result"

# start_site S: starts Caddy under callgrind serving site S alone on a free
# port (sets port and pid); three ports are tried before giving up (see
# serving).
start_site() {
	local s=$1 attempt
	for attempt in 1 2 3; do
		port=$(free_port)
		{
			printf '{\n\tadmin off\n\tauto_https off\n\tpersist_config off\n\tskip_install_trust\n}\n'
			printf '\nhttp://127.0.0.1:%s {\n\tbind 127.0.0.1\n' "$port"
			"site_$s" "$s" | sed 's/^/\t/'
			printf '}\n'
		} >"$workdir/Caddyfile-$s"
		if launch "$workdir/Caddyfile-$s" "$workdir/caddy-$s.log" 120 "$port" -- \
			env GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off taskset -c "$CADDY_CPU" \
			valgrind --tool=callgrind --callgrind-out-file="$out" \
			"$workdir/caddy" run --config "$workdir/Caddyfile-$s" --adapter caddyfile; then
			pid=$LAUNCHED
			return 0
		fi
		rm -f "$out".*
	done
	die "Caddy did not start for $s"
}

run_caddy() {
	need wrk wrk
	# e2e.sh's sites (bench/lib.sh), pass with headers off, the
	# references for it and for deny_handle_errors, and the leasing
	# mode; SITES picks some ("plain pass redis_pass": plain first, the
	# ratio's base).
	local sites
	read -ra sites <<<"${SITES:-plain noop_handler headers_reference pass pass_headers_off deny deny_handle_errors error_handle_errors error_headers_reference redis_pass leased}"
	go build -o "$workdir/caddy" ./cmd/caddy
	local s
	for s in "${sites[@]}"; do
		# The Redis sites' redis-server runs natively, on wrk's core:
		# only Caddy is counted.
		if declare -F "setup_$s" >/dev/null; then "setup_$s"; fi
	done
	echo "instructions: one Caddy per site under callgrind; $DURATION of wrk -c$CONNS per site"
	local plain=0 n ir per port out pid
	printf '%-22s %10s %14s %8s\n' site requests instr/request ratio | tee -a "$result"
	for s in "${sites[@]}"; do
		# One Caddy per site: a Caddy serving every site at once has
		# stopped under callgrind on an assertion at thread creation
		# (vgCallgrind_post_signal); one site at a time has not.
		out="$workdir/caddy-$s.cg"
		start_site "$s"
		taskset -c "$WRK_CPU" wrk -t1 -c"$CONNS" -d2s "http://127.0.0.1:$port/" >/dev/null
		callgrind_control -z "$pid" >/dev/null 2>&1
		n=$(taskset -c "$WRK_CPU" wrk -t1 -c"$CONNS" -d"$DURATION" "http://127.0.0.1:$port/" | awk '/requests in/ { print $1 }')
		ir=$(dump_total "$out" "$pid")
		# PROFILES=1 keeps each site's dump, for callgrind_annotate.
		[ -n "${PROFILES:-}" ] && cp "$(ls -t "$out".* | head -1)" "bench/results/callgrind-$s.out"
		kill "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null || true
		per=$((ir / n))
		[ "$s" = plain ] && plain=$per
		printf '%-22s %10d %14d %8s\n' "$s" "$n" "$per" "$(awk -v p="$plain" -v x="$per" 'BEGIN { printf "%.3f", p / x }')" | tee -a "$result"
	done
}

run_lua() {
	need redis-server redis-server
	local port out pid
	port=$(free_port)
	out="$workdir/redis.cg"
	go build -o "$workdir/luacalls" ./bench/luacalls
	taskset -c "$REDIS_CPU" valgrind --tool=callgrind --callgrind-out-file="$out" redis-server --bind 127.0.0.1 \
		--port "$port" --save "" --appendonly no --dir "$workdir" >"$workdir/redis.log" 2>&1 &
	pid=$!
	on_exit "kill $pid 2>/dev/null; wait $pid 2>/dev/null"
	wait_port "$port" 60 || { tail -20 "$workdir/redis.log" >&2; die "redis-server did not start"; }
	echo "instructions: redis-server under callgrind (pid $pid); $N script calls per algorithm"
	printf '%-16s %14s\n' script instr/call | tee -a "$result"
	local alg ir
	for alg in ${ALGS:-sliding_log sliding_window fixed_window token_bucket leaky_bucket gcra concurrency}; do
		# The store's own calls (bench/luacalls): the script as sent,
		# its keys and arguments. A warm-up loads the script and the
		# keys; the measured run's connection set-up (HELLO, CLIENT
		# SETINFO) adds a few instructions per call.
		taskset -c "$WRK_CPU" "$workdir/luacalls" -addr "127.0.0.1:$port" -alg "$alg" -n 1000
		callgrind_control -z "$pid" >/dev/null 2>&1
		taskset -c "$WRK_CPU" "$workdir/luacalls" -addr "127.0.0.1:$port" -alg "$alg" -n "$N"
		ir=$(dump_total "$out" "$pid")
		printf '%-16s %14d\n' "$alg" "$((ir / N))" | tee -a "$result"
	done
	redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
}

run_pipeline() {
	need redis-server redis-server
	go test -c -o "$workdir/redisstore.test" ./redisstore/
	echo "instructions: BenchmarkRedisPipeline/direct under callgrind; $TAKES Takes per batch size"
	printf '%-16s %14s\n' in_flight instr/take | tee -a "$result"
	local n ir
	for n in 1 8 32 128; do
		rm -f "$workdir"/pipe.cg*
		# The loop's dump is the fourth: before the first processCPU,
		# then b.N=1's run, then the gap before b.N=TAKES's loop.
		(cd redisstore && GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off valgrind --tool=callgrind \
			--callgrind-out-file="$workdir/pipe.cg" --dump-before='*redisstore.processCPU' \
			"$workdir/redisstore.test" -test.run '^$' -test.bench "RedisPipeline/direct/$n\$" \
			-test.benchtime "${TAKES}x" -test.cpu 1) >"$workdir/pipe.log" 2>&1 || true
		[ -s "$workdir/pipe.cg.4" ] || { tail -20 "$workdir/pipe.log" >&2; die "no dump of the measured loop ($n in flight)"; }
		ir=$(awk '/^(summary|totals):/ { print $2; exit }' "$workdir/pipe.cg.4")
		printf '%-16s %14d\n' "$n" "$((ir / TAKES))" | tee -a "$result"
	done
}

case ${1:-all} in
caddy) run_caddy ;;
lua) run_lua ;;
pipeline) run_pipeline ;;
all) run_lua; run_caddy ;;
*) die "usage: bash bench/instructions.sh [caddy|lua|pipeline|all]" ;;
esac
echo "instructions: written to $result"
