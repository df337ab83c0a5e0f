# Shared by the bench scripts (sourced, not run): the scenarios of
# bench/e2e.sh, one Caddy site each, and the helpers that start and stop what
# a run needs. The sourcing script sets BENCH (its name, for messages) and
# creates workdir before any setup_<name> runs.

# repo is the repository, the scripts' working directory.
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

# Go from its usual place when it is not on PATH.
if ! command -v go >/dev/null 2>&1; then
	export PATH="$PATH:/usr/local/go/bin"
fi

CADDY_CPU=${CADDY_CPU:-0}
WRK_CPU=${WRK_CPU:-1}
REDIS_CPU=${REDIS_CPU:-$WRK_CPU}
# The algorithm of the rate-limited scenarios (default: the module's default).
ALGORITHM=${ALGORITHM:-sliding_log}

# ---------------------------------------------------------------------------
# Scenarios.

ALL_SCENARIOS=(plain headers_reference pass deny deny_handle_errors error_handle_errors redis_pass redis_deny redis_sync_pass leased)
declare -A EXPECT=() TARGET=()

# plain: Caddy alone, the baseline every ratio is taken against.
EXPECT[plain]=ok
site_plain() {
	cat <<-'SITE'
		respond "ok"
	SITE
}

# headers_reference: no rate_limit; plain Caddy writing, with its own
# `header` handler, the five headers the pass scenario writes (the default
# `headers both`): what those response headers cost any handler, the
# reference for pass.
EXPECT[headers_reference]=ok
site_headers_reference() {
	cat <<-'SITE'
		header {
			RateLimit-Policy "\"pass\";q=1000000;w=1"
			RateLimit "\"pass\";r=999999;t=1"
			X-RateLimit-Limit 1000000
			X-RateLimit-Remaining 999999
			X-RateLimit-Reset 1
		}
		respond "ok"
	SITE
}

# noop_handler: plain with one more handler in the route that does nothing
# but call the next: Caddy's `vars` setting one value (under callgrind
# cheaper than `request_header -X-Noop`, the other one measured): what
# Caddy charges for one more handler, the reference for pass_headers_off
# (bench/instructions.sh; not in ALL_SCENARIOS).
EXPECT[noop_handler]=ok
site_noop_handler() {
	cat <<-'SITE'
		vars noop 1
		respond "ok"
	SITE
}

# pass: rate_limit in front, per client address, with a limit never reached.
EXPECT[pass]=ok
TARGET[pass]=0.97
site_pass() { memory_site "$1" "1000000 1s"; }

# pass_headers_off: pass with `headers off`: the decision without the
# response headers (bench/instructions.sh; not in ALL_SCENARIOS).
EXPECT[pass_headers_off]=ok
site_pass_headers_off() { memory_site "$1" "1000000 1s" "headers off"; }

# deny: a limit of 1 per hour, so (after the first) every request is denied;
# the site has no handle_errors, so the handler writes the 429 itself.
EXPECT[deny]=deny
TARGET[deny]=0.97
site_deny() { memory_site "$1" "1 1h"; }

# deny_handle_errors: the same, but the site renders rejections through a
# handle_errors route (Caddy's error path).
EXPECT[deny_handle_errors]=deny
TARGET[deny_handle_errors]=0.72
site_deny_handle_errors() {
	memory_site "$1" "1 1h"
	cat <<-'SITE'
		handle_errors {
			respond "rate limited" {err.status_code}
		}
	SITE
}

# memory_site ZONE "EVENTS WINDOW" [HANDLER OPTION]: a site limiting per
# client address with ALGORITHM in the memory store.
memory_site() {
	cat <<-SITE
		rate_limit {
			zone $1 {
				key {http.request.remote.host}
				algorithm $ALGORITHM
				limit $2
			}
			${3:-}
		}
		respond "ok"
	SITE
}

# error_handle_errors: no rate_limit; Caddy's own `error 429` rendered by the
# same handle_errors route: what Caddy's error path alone costs on this
# machine, the reference for deny_handle_errors.
EXPECT[error_handle_errors]=deny
site_error_handle_errors() {
	cat <<-'SITE'
		error 429
		handle_errors {
			respond "rate limited" {err.status_code}
		}
	SITE
}

# error_headers_reference: error_handle_errors with, set by Caddy's own
# `header` handler before the error, the six headers deny_handle_errors
# sends with its 429 (the default `headers both` and Retry-After): what
# Caddy's error path costs with those headers, the reference for
# deny_handle_errors by what is left when the headers are counted on both
# sides (bench/instructions.sh; not in ALL_SCENARIOS).
EXPECT[error_headers_reference]=deny
site_error_headers_reference() {
	cat <<-'SITE'
		header {
			Retry-After 3600
			RateLimit-Policy "\"deny_handle_errors\";q=1;w=3600"
			RateLimit "\"deny_handle_errors\";r=0;t=3600"
			X-RateLimit-Limit 1
			X-RateLimit-Remaining 0
			X-RateLimit-Reset 3600
		}
		error 429
		handle_errors {
			respond "rate limited" {err.status_code}
		}
	SITE
}

# Redis scenarios: start_redis starts one redis-server, on wrk's core (the
# machine has two: Caddy's and the load's). Only them, for instance:
#   SCENARIOS="redis_pass redis_deny redis_sync_pass" bash bench/e2e.sh
# redis_pass: the redis store, one EVALSHA per request, limit never reached.
EXPECT[redis_pass]=ok
TARGET[redis_pass]=0.70
setup_redis_pass() { start_redis; }
site_redis_pass() { redis_site "$1" "${REDIS_ALGORITHM:-gcra}" "1000000 1s"; }

# redis_deny: the redis store, almost every request denied.
EXPECT[redis_deny]=deny
TARGET[redis_deny]=0.70
setup_redis_deny() { start_redis; }
site_redis_deny() { redis_site "$1" "${REDIS_ALGORITHM:-gcra}" "1 1h"; }

# redis_sync_pass: the two-layer mode (sync_interval 1s): decisions are
# local, one script call per key per second.
EXPECT[redis_sync_pass]=ok
TARGET[redis_sync_pass]=0.97
setup_redis_sync_pass() { start_redis; }
site_redis_sync_pass() { redis_site "$1" fixed_window "100000000 1m" "sync_interval 1s"; }

# leased: the leasing mode (lease 1s) on one hot key (wrk's one address):
# decisions from leased units, one script call per batch. Its target is
# against memory `pass`, by CPU per request (e2e.sh prints it): >= 0.90.
EXPECT[leased]=ok
setup_leased() { start_redis; }
site_leased() { redis_site "$1" "${ALGORITHM:-sliding_log}" "100000000 1m" "lease 1s"; }

# redis_site ZONE ALGORITHM "EVENTS WINDOW" [HANDLER OPTION]: a site limiting
# per client address in the store redis, at REDIS_ADDR.
redis_site() {
	cat <<-SITE
		rate_limit {
			zone $1 {
				key {http.request.remote.host}
				algorithm $2
				limit $3
			}
			store redis
			redis $REDIS_ADDR
			${4:-}
		}
		respond "ok"
	SITE
}

# ---------------------------------------------------------------------------
# Helpers.

EXIT_HOOKS=()
# on_exit CMD: run CMD (a string for eval) when the script exits.
on_exit() { EXIT_HOOKS+=("$1"); }
run_exit_hooks() {
	local i
	for ((i = ${#EXIT_HOOKS[@]} - 1; i >= 0; i--)); do
		eval "${EXIT_HOOKS[i]}" || true
	done
}
trap run_exit_hooks EXIT
trap 'exit 130' INT TERM

# proc_ticks PID, proc_sys_ticks PID: the CPU ticks (CLK_TCK a second) a
# process has used, in all and in the kernel (0 once it is gone).
proc_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
proc_sys_ticks() { awk '{ print $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
CLK_TCK=$(getconf CLK_TCK 2>/dev/null || echo 100)

# tick_us TICKS N DIGITS: TICKS of CPU over N requests, in µs a request,
# with DIGITS decimals (0 when N is 0).
tick_us() { awk -v c="$1" -v n="$2" -v hz="$CLK_TCK" -v d="$3" 'BEGIN { printf "%.*f", d, n ? c * 1e6 / hz / n : 0 }'; }

# median: the median of the numbers on standard input, one a line;
# median_of "LIST": of a space-separated list.
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
median_of() { tr ' ' '\n' <<<"$1" | grep . | median; }

die() {
	echo "$BENCH: $*" >&2
	exit 1
}

# free_port: a loopback TCP port nothing listens on (and not handed out by
# this script before).
USED_PORTS=" "
free_port() {
	local p
	for _ in $(seq 200); do
		p=$((20000 + RANDOM % 30000))
		case $USED_PORTS in *" $p "*) continue ;; esac
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			USED_PORTS+="$p "
			echo "$p"
			return 0
		fi
	done
	die "no free port found"
}

# wait_port PORT [SECONDS]: wait until something accepts on PORT.
wait_port() {
	local port=$1 limit=${2:-30} i
	for ((i = 0; i < limit * 10; i++)); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			return 0
		fi
		sleep 0.1
	done
	return 1
}

# serving PID SECONDS PORT...: wait (at most SECONDS for each) until every
# PORT accepts, and PID still runs a second later: the ports are that
# process's, not another's that took one between free_port and its bind
# (the process then exits on the bind's error).
serving() {
	local pid=$1 limit=$2 port
	shift 2
	for port in "$@"; do
		wait_port "$port" "$limit" || return 1
	done
	sleep 1
	kill -0 "$pid" 2>/dev/null
}

# launch CADDYFILE LOG SECONDS PORT... -- COMMAND...: dies, showing
# CADDYFILE and Caddy's error, unless it adapts ($workdir/caddy); starts
# COMMAND (which runs Caddy on it) in the background, its output in LOG,
# stopped on exit; and waits until it serves every PORT (see serving).
# Sets LAUNCHED to its PID. Returns 1, the process stopped and LOG's last
# lines shown, if it does not serve (another process took a port).
launch() {
	local cf=$1 log=$2 limit=$3 ports=()
	shift 3
	while [ "$1" != -- ]; do ports+=("$1"); shift; done
	shift
	"$workdir/caddy" fmt --overwrite "$cf" >/dev/null 2>&1 || true
	"$workdir/caddy" adapt --config "$cf" --adapter caddyfile >/dev/null 2>"$log.adapt" ||
		{ cat "$cf" "$log.adapt" >&2; die "$cf does not adapt"; }
	"$@" >"$log" 2>&1 &
	LAUNCHED=$!
	on_exit "kill $LAUNCHED 2>/dev/null; wait $LAUNCHED 2>/dev/null"
	serving "$LAUNCHED" "$limit" "${ports[@]}" && return 0
	echo "$BENCH: Caddy did not start on port(s) ${ports[*]}" >&2
	tail -3 "$log" >&2
	kill "$LAUNCHED" 2>/dev/null
	wait "$LAUNCHED" 2>/dev/null || true
	return 1
}

need() {
	command -v "$1" >/dev/null 2>&1 && return 0
	if [ -n "${2:-}" ]; then
		echo "$BENCH: $1 is missing; installing Debian package $2"
		local sudo=
		[ "$(id -u)" -eq 0 ] || sudo=sudo
		$sudo apt-get update && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y "$2"
		command -v "$1" >/dev/null 2>&1 && return 0
	fi
	die "$1 is required"
}

# start_redis: starts one redis-server for the whole run (once, however many
# scenarios call it) on a free loopback port, pinned to REDIS_CPU, without
# persistence, and sets REDIS_ADDR (127.0.0.1:<port>); it is stopped on exit.
# For a setup_<name> function of a Redis scenario, e.g.
#
#   ALL_SCENARIOS+=(redis_pass)
#   EXPECT[redis_pass]=ok
#   TARGET[redis_pass]=0.70
#   setup_redis_pass() { start_redis; }
#   site_redis_pass() {
#   	cat <<-SITE
#   		rate_limit {
#   			zone $1 { ... }
#   			store redis
#   			redis { address $REDIS_ADDR }
#   		}
#   		respond "ok"
#   	SITE
#   }
REDIS_ADDR=""
start_redis() {
	[ -z "$REDIS_ADDR" ] || return 0
	need redis-server redis-server
	local port dir
	port=$(free_port)
	dir="$workdir/redis-$port"
	mkdir -p "$dir"
	taskset -c "$REDIS_CPU" redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
		--dir "$dir" --daemonize no --protected-mode yes >"$dir/redis.log" 2>&1 &
	local pid=$!
	on_exit "kill $pid 2>/dev/null; wait $pid 2>/dev/null"
	wait_port "$port" 10 || { cat "$dir/redis.log" >&2; die "redis-server did not start on $port"; }
	REDIS_ADDR=127.0.0.1:$port
	echo "$BENCH: redis-server $(redis-server --version | grep -o 'v=[0-9.]*') on $REDIS_ADDR, core $REDIS_CPU"
}
