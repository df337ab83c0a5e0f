#!/usr/bin/env bash
# End-to-end throughput of the rate_limit handler against plain Caddy.
#
# Builds ./cmd/caddy, starts ONE Caddy pinned to core 0 (taskset -c 0) serving
# one site per scenario on its own loopback port, and drives each site with
# wrk pinned to core 1 (taskset -c 1 wrk -t1 -c50 -d10s). After a warm-up of
# every site it measures ROUNDS rounds, the scenarios interleaved within each
# round so that drift (other load on the machine) hits all of them alike, and
# prints requests/s per scenario (best and median) and each scenario's ratio
# to plain Caddy measured in the same run. Results are written to
# bench/results/ (gitignored).
#
#   bash bench/e2e.sh                       # every scenario
#   SCENARIOS="plain deny" bash bench/e2e.sh
#   ROUNDS=5 DURATION=15s bash bench/e2e.sh
#
# The figures only mean something on an otherwise idle machine: the load
# average at the start and end is printed and recorded next to them.
#
# Adding a scenario (in bench/lib.sh): append its name to ALL_SCENARIOS, write a function
# site_<name> that prints the body of its site block (it gets the scenario
# name as $1, handy as a zone name), set EXPECT[<name>] to
# "ok" (requests should pass) or "deny" (almost all should be rejected) and,
# optionally, TARGET[<name>] (the ratio to plain it should reach). Anything it
# needs started (e.g. a redis-server) goes in a setup_<name> function, which
# runs before Caddy starts; register what must be stopped with on_exit.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-3s}
CONNECTIONS=${CONNECTIONS:-50}

# The scenarios (site_<name>, EXPECT, TARGET, setup_<name>) and the helpers
# shared with bench/instructions.sh; it also sets repo, the working
# directory, and puts Go on PATH.
BENCH=e2e
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# run_wrk PORT DURATION: prints "<requests/s> <requests> <non-2xx/3xx>".
run_wrk() {
	local out
	out=$(taskset -c "$WRK_CPU" wrk -t1 -c"$CONNECTIONS" -d"$2" "http://127.0.0.1:$1/")
	echo "$out" >>"$workdir/wrk.log"
	awk '
		/^Requests\/sec:/ { rps = $2 }
		/requests in/ { total = $1 }
		/Non-2xx or 3xx responses:/ { bad = $NF }
		END { printf "%s %s %d\n", rps, total, bad }
	' <<<"$out"
}

# CPU accounting, to tell how much other processes used while we measured:
# busy ticks of the whole machine (user, nice, system, irq, softirq), steal
# ticks (a process's: proc_ticks, in bench/lib.sh) and those of this shell's
# finished children (wrk, curl, awk). Approximate (ticks are sampled): a few
# percent either way.
cpu_busy() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }
cpu_steal() { awk '/^cpu / { print $9 }' /proc/stat; }
# Context switches of all the process's threads, voluntary and not: a
# thread that sleeps (an idle Go scheduler, Go's sysmon) or is preempted.
proc_csw() {
	cat /proc/"$1"/task/*/status 2>/dev/null |
		awk '/^(non)?voluntary_ctxt_switches:/ { s += $2 } END { print s + 0 }'
}
# Sets KIDS (not printed: `times` in a $(...) subshell would see its own
# children only).
children_ticks() {
	times >"$workdir/times"
	KIDS=$(tail -1 "$workdir/times" | awk -v hz="$CLK_TCK" '{
		t = 0
		for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] }
		printf "%d\n", t * hz
	}')
}

best() { sort -g | tail -1; }

# ---------------------------------------------------------------------------
# Main.

need go
need taskset
need curl curl
need wrk wrk
[ "$(nproc)" -ge 2 ] || echo "e2e: warning: fewer than 2 cores; Caddy and wrk will share one" >&2

if [ -n "${SCENARIOS:-}" ]; then
	read -r -a scenarios <<<"$SCENARIOS"
	case " ${scenarios[*]} " in *" plain "*) ;; *) scenarios=(plain "${scenarios[@]}") ;; esac
else
	scenarios=("${ALL_SCENARIOS[@]}")
fi
for s in "${scenarios[@]}"; do
	declare -F "site_$s" >/dev/null || die "unknown scenario $s (no site_$s function)"
done

workdir=$(mktemp -d "${TMPDIR:-/tmp}/e2e.XXXXXX")
on_exit "rm -rf '$workdir'"

echo "e2e: building ./cmd/caddy"
go build -o "$workdir/caddy" ./cmd/caddy

for s in "${scenarios[@]}"; do
	if declare -F "setup_$s" >/dev/null; then
		echo "e2e: setting up $s"
		"setup_$s"
	fi
done

declare -A PORT=()
# start_caddy: writes the Caddyfile of every scenario, each on a free port
# (PORT), and starts Caddy (caddy_pid); three sets of ports are tried before
# giving up (see serving).
start_caddy() {
	local attempt s
	for attempt in 1 2 3; do
		{
			cat <<-'GLOBAL'
				{
					admin off
					auto_https off
					persist_config off
					skip_install_trust
				}
			GLOBAL
			for s in "${scenarios[@]}"; do
				PORT[$s]=$(free_port)
				echo
				echo "# scenario $s"
				echo "http://127.0.0.1:${PORT[$s]} {"
				echo "	bind 127.0.0.1"
				"site_$s" "$s" | sed 's/^/\t/'
				echo "}"
			done
		} >"$workdir/Caddyfile"
		echo "e2e: starting Caddy on core $CADDY_CPU (attempt $attempt)"
		if launch "$workdir/Caddyfile" "$workdir/caddy.log" 30 "${PORT[@]}" -- \
			taskset -c "$CADDY_CPU" "$workdir/caddy" run --config "$workdir/Caddyfile" --adapter caddyfile; then
			caddy_pid=$LAUNCHED
			return 0
		fi
	done
	die "Caddy did not start"
}
start_caddy

# Sanity: each site answers as its scenario expects.
for s in "${scenarios[@]}"; do
	codes=""
	for _ in 1 2 3; do
		codes+="$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:${PORT[$s]}/") "
	done
	echo "e2e: $s on port ${PORT[$s]}: statuses $codes"
	case ${EXPECT[$s]:-ok} in
	ok) [[ $codes == "200 200 200 " ]] || die "$s should answer 200, got $codes" ;;
	deny) [[ ${codes% } == *" 429" ]] || die "$s should deny with 429, got $codes" ;;
	esac
done

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
echo "e2e: load average at start: $load_start"
if awk -v l="${load_start%% *}" 'BEGIN { exit !(l >= 0.5) }'; then
	echo "e2e: warning: the machine is not idle (load average ${load_start%% *}); the figures will be noisy" >&2
fi
echo "e2e: warm-up, $WARMUP per scenario"
for s in "${scenarios[@]}"; do run_wrk "${PORT[$s]}" "$WARMUP" >/dev/null; done

declare -A RPS=() BAD=() TOTAL=() CPUT=() SYST=() CSW=() WALL=()
t_start=$(date +%s.%N) busy_start=$(cpu_busy) steal_start=$(cpu_steal)
caddy_start=$(proc_ticks "$caddy_pid")
children_ticks
kids_start=$KIDS
for ((r = 1; r <= ROUNDS; r++)); do
	for s in "${scenarios[@]}"; do
		c0=$(proc_ticks "$caddy_pid") k0=$(proc_sys_ticks "$caddy_pid") x0=$(proc_csw "$caddy_pid") w0=$(date +%s%N)
		read -r rps total bad < <(run_wrk "${PORT[$s]}" "$DURATION")
		CPUT[$s]=$((${CPUT[$s]:-0} + $(proc_ticks "$caddy_pid") - c0))
		SYST[$s]=$((${SYST[$s]:-0} + $(proc_sys_ticks "$caddy_pid") - k0))
		CSW[$s]=$((${CSW[$s]:-0} + $(proc_csw "$caddy_pid") - x0))
		WALL[$s]=$((${WALL[$s]:-0} + $(date +%s%N) - w0))
		RPS[$s]+="$rps "
		TOTAL[$s]=$((${TOTAL[$s]:-0} + total))
		BAD[$s]=$((${BAD[$s]:-0} + bad))
		printf 'e2e: round %d/%d %-22s %10.0f req/s\n' "$r" "$ROUNDS" "$s" "$rps"
	done
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)
t_end=$(date +%s.%N) busy_end=$(cpu_busy) steal_end=$(cpu_steal)
caddy_end=$(proc_ticks "$caddy_pid")
children_ticks
kids_end=$KIDS
[ -z "${E2E_DEBUG:-}" ] || echo "e2e: debug: busy $((busy_end - busy_start)) caddy $((caddy_end - caddy_start)) children $((kids_end - kids_start)) ticks in $(awk -v a="$t_start" -v b="$t_end" 'BEGIN { print b - a }') s"
# Percent of one core used by processes other than this Caddy and wrk while
# the rounds ran, and stolen by the hypervisor.
others=$(awk -v b=$((busy_end - busy_start)) -v c=$((caddy_end - caddy_start)) -v k=$((kids_end - kids_start)) \
	-v t0="$t_start" -v t1="$t_end" -v hz="$CLK_TCK" 'BEGIN { v = 100 * (b - c - k) / ((t1 - t0) * hz); printf "%.0f", v < 0 ? 0 : v }')
stolen=$(awk -v s=$((steal_end - steal_start)) -v t0="$t_start" -v t1="$t_end" -v hz="$CLK_TCK" 'BEGIN { printf "%.0f", 100 * s / ((t1 - t0) * hz) }')
echo "e2e: other processes used ${others}% of a core during the rounds (steal ${stolen}%)"

# Report.
mkdir -p bench/results
stamp=$(date -u +%Y%m%dT%H%M%SZ)
result=bench/results/e2e-$stamp.txt
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
{
	echo "# bench/e2e.sh $stamp commit $commit$(git diff --quiet HEAD 2>/dev/null || echo '+dirty')"
	echo "# $(go version | cut -d' ' -f3-), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
	echo "# caddy on core $CADDY_CPU; wrk -t1 -c$CONNECTIONS -d$DURATION on core $WRK_CPU; $ROUNDS rounds after a $WARMUP warm-up; algorithm $ALGORITHM"
	echo "# load average at start $load_start; during the rounds other processes used ${others}% of a core, steal ${stolen}% (other load makes the figures noisy)"
	printf '%-22s %10s %10s %8s %8s %8s %-7s %8s %8s %8s %8s %6s\n' scenario best_rps median_rps ratio_b ratio_m target non2xx cpu_us cpu_ratio sys_us csw_req busy
	plain_best=$(tr ' ' '\n' <<<"${RPS[plain]}" | grep . | best)
	plain_median=$(median_of "${RPS[plain]}")
	for s in "${scenarios[@]}"; do
		b=$(tr ' ' '\n' <<<"${RPS[$s]}" | grep . | best)
		m=$(median_of "${RPS[$s]}")
		rb=$(awk -v a="$b" -v p="$plain_best" 'BEGIN { printf "%.3f", a / p }')
		rm=$(awk -v a="$m" -v p="$plain_median" 'BEGIN { printf "%.3f", a / p }')
		t=${TARGET[$s]:-}
		verdict=""
		if [ -n "$t" ]; then
			if awk -v r="$rb" -v t="$t" 'BEGIN { exit !(r >= t) }'; then verdict="ok"; else verdict="MISS"; fi
		fi
		nonok=$(awk -v b="${BAD[$s]}" -v n="${TOTAL[$s]}" 'BEGIN { printf "%.1f%%", n ? 100 * b / n : 0 }')
		# Caddy's own CPU per request (all rounds), and plain's over this
		# scenario's: the throughput ratio when Caddy's core is the
		# bottleneck, without the noise of wrk's scheduling.
		cu=$(tick_us "${CPUT[$s]}" "${TOTAL[$s]}" 1)
		cp=$(tick_us "${CPUT[plain]}" "${TOTAL[plain]}" 1)
		cr=$(awk -v a="$cu" -v p="$cp" 'BEGIN { printf "%.3f", (a > 0 ? p / a : 0) }')
		# The kernel's part of cpu_us (system calls, network stack).
		su=$(tick_us "${SYST[$s]}" "${TOTAL[$s]}" 1)
		# Context switches of Caddy's threads per request, and how busy
		# Caddy's core was: a Caddy that waits (for Redis) rather than
		# works goes idle and comes back, and each time Go's scheduler
		# and its sysmon thread sleep and wake, which costs CPU that no
		# count of instructions shows.
		xr=$(awk -v x="${CSW[$s]}" -v n="${TOTAL[$s]}" 'BEGIN { printf "%.3f", n ? x / n : 0 }')
		bz=$(awk -v c="${CPUT[$s]}" -v w="${WALL[$s]}" -v hz="$CLK_TCK" 'BEGIN { printf "%.0f%%", w ? 100 * c / hz / (w / 1e9) : 0 }')
		printf '%-22s %10.0f %10.0f %8s %8s %8s %-7s %8s %8s %8s %8s %6s\n' "$s" "$b" "$m" "$rb" "$rm" "${t:+>=$t $verdict}" "$nonok" "$cu" "$cr" "$su" "$xr" "$bz"
	done
	for s in "${scenarios[@]}"; do
		printf '# rounds %-22s %s\n' "$s" "$(printf '%.0f ' ${RPS[$s]})"
	done
} | tee "$result"
# leased is measured against memory pass (the same decision, shared):
# pass's CPU per request over leased's.
if [ -n "${CPUT[leased]:-}" ] && [ -n "${CPUT[pass]:-}" ]; then
	awk -v cl="${CPUT[leased]}" -v nl="${TOTAL[leased]}" -v cp="${CPUT[pass]}" -v np="${TOTAL[pass]}" 'BEGIN {
		r = (nl && np && cl) ? (cp / np) / (cl / nl) : 0
		printf "# leased/pass by CPU per request: %.3f (target >= 0.90: %s)\n", r, (r >= 0.90 ? "ok" : "MISS")
	}' | tee -a "$result"
fi
cp "$result" bench/results/e2e-latest.txt
echo "e2e: written to $result (ratios are to plain in this run: ratio_b of best rounds, ratio_m of medians; cpu_us is Caddy's CPU per request, cpu_ratio plain's over the scenario's, sys_us the kernel's part of cpu_us, csw_req Caddy's context switches per request, busy how much of its core Caddy used)"

# A scenario that should pass but saw errors, or should deny but passed,
# measured the wrong thing.
for s in "${scenarios[@]}"; do
	case ${EXPECT[$s]:-ok} in
	ok) [ "${BAD[$s]}" -eq 0 ] || die "$s: ${BAD[$s]} of ${TOTAL[$s]} responses were not 2xx/3xx" ;;
	deny) [ $((BAD[$s] * 100)) -ge $((TOTAL[$s] * 99)) ] || die "$s: only ${BAD[$s]} of ${TOTAL[$s]} responses were denied" ;;
	esac
done
