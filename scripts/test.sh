#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this):
#
#   1. deps       install redis-server and redis-tools, gcc (go test -race
#                 needs cgo) and curl, from Debian's packages when missing
#                 (the tests start their own Redis servers)
#   2. gofmt      `gofmt -l` must list nothing
#   3. vet        go vet ./... (CGO_ENABLED=0, as staticcheck, scripts/run.sh
#                 and xcaddy build: they reuse what it compiled)
#   4. staticcheck honnef.co/go/tools, pinned, from the module proxy
#   5. test       go test -race -count=1 ./...
#   6. fuzz       every Fuzz target in the repo, briefly (FUZZTIME executions
#                 each, default 20000x), but those of packages that link
#                 Caddy unless FUZZ_ALL=1: fuzzing instruments every package
#                 linked, so the first such target costs a third cold
#                 compile of Caddy (about 4 minutes on 2 cores). The test
#                 step runs their seed corpora, under -race.
#   7. xcaddy     scripts/xcaddy-check.sh: the README's xcaddy line, run as
#                 written, builds a Caddy that lists http.handlers.rate_limit
#   8. example    scripts/example-check.sh: the README's quick start to the
#                 letter: scripts/run.sh serves Caddyfile.example, and every
#                 recipe command in its comments prints what it should
#
# CI=true is exported (unless CI is already set), so a Redis test that cannot
# start Redis fails instead of skipping.
#
# Every step runs even when an earlier one failed; the summary at the end names
# each failed step, and the exit status is non-zero if any failed.
# Environment knobs:
#   SKIP="fuzz xcaddy"   steps to skip (names as above)
#   FUZZTIME=20000x      how much each fuzz target runs: a count of executions
#                        (Nx). A duration (15s) works too, but go1.26's fuzz
#                        coordinator can fail a target with a bare "context
#                        deadline exceeded" when the -fuzztime deadline races a
#                        busy worker (go.dev/issue/75804, fixed in Go 1.27); a
#                        count has no deadline to race.
#   FUZZ_ALL=1           fuzz the targets of packages that link Caddy too
#   TEST_TIMEOUT=20m     go test -timeout
set -uo pipefail

STATICCHECK_VERSION=${STATICCHECK_VERSION:-v0.8.2} # staticcheck 2026.2.2, supports Go 1.26
FUZZTIME=${FUZZTIME:-20000x}
TEST_TIMEOUT=${TEST_TIMEOUT:-20m}
FUZZ_ALL=${FUZZ_ALL:-}
SKIP=${SKIP:-}

export CI=${CI:-true}

if ! command -v go >/dev/null 2>&1; then
	export PATH="$PATH:/usr/local/go/bin"
fi
if ! command -v go >/dev/null 2>&1; then
	echo "test.sh: Go is not installed (looked on PATH and in /usr/local/go/bin)" >&2
	exit 1
fi

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1

failed=()
timings=()
start_all=$SECONDS

# step NAME COMMAND...: runs COMMAND unless NAME is in $SKIP, records the
# result and how long it took.
step() {
	local name=$1
	shift
	case " $SKIP " in
	*" $name "*)
		echo "=== SKIP $name"
		timings+=("$(printf '%-12s skipped' "$name")")
		return 0
		;;
	esac
	echo
	echo "=== RUN  $name: $*"
	local t0=$SECONDS rc=0
	"$@" || rc=$?
	local dt=$((SECONDS - t0))
	if [ "$rc" -eq 0 ]; then
		echo "=== PASS $name (${dt}s)"
		timings+=("$(printf '%-12s ok    %4ds' "$name" "$dt")")
	else
		echo "=== FAIL $name (exit $rc, ${dt}s)" >&2
		timings+=("$(printf '%-12s FAIL  %4ds' "$name" "$dt")")
		failed+=("$name")
	fi
	return 0
}

# install_deps installs, from Debian's packages, what the tests need and a
# fresh machine may lack: redis-server and redis-tools (the tests start their
# own servers; Debian's package starts none here) and a C compiler (go test
# -race needs cgo).
install_deps() {
	local pkgs=()
	if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
		pkgs+=(redis-server redis-tools)
	fi
	if ! command -v curl >/dev/null 2>&1; then
		pkgs+=(curl)
	fi
	if ! command -v "$(go env CC 2>/dev/null || echo gcc)" >/dev/null 2>&1 && ! command -v gcc >/dev/null 2>&1; then
		pkgs+=(gcc libc6-dev)
	fi
	if [ ${#pkgs[@]} -gt 0 ]; then
		local sudo=
		if [ "$(id -u)" -ne 0 ]; then
			if ! command -v sudo >/dev/null 2>&1; then
				echo "deps: ${pkgs[*]} missing and neither root nor sudo is available" >&2
				return 1
			fi
			sudo=sudo
		fi
		echo "deps: installing ${pkgs[*]} from Debian's packages"
		$sudo apt-get update &&
			DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y "${pkgs[@]}" || return 1
	fi
	echo "deps: $(redis-server --version)"
	echo "deps: C compiler $(command -v "$(go env CC)" || command -v gcc)"
}

check_gofmt() {
	local out
	out=$(gofmt -l .) || return 1
	if [ -n "$out" ]; then
		echo "gofmt: these files need \`gofmt -w\`:" >&2
		echo "$out" >&2
		return 1
	fi
}

run_staticcheck() {
	CGO_ENABLED=0 go run "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION" ./...
}

# The test step's output, kept so that the end of this script can repeat
# what failed: a package's output on failure is long (Caddy's and the
# handler's log lines), and a CI log's tail should name the test.
test_log=$(mktemp)
trap 'rm -f "$test_log"' EXIT

run_tests() {
	CGO_ENABLED=1 go test -race -count=1 -timeout "$TEST_TIMEOUT" ./... 2>&1 | tee "$test_log"
	return "${PIPESTATUS[0]}"
}

# failed_tests: the "--- FAIL" lines of the test step, each with the
# indented lines after it (the test's own t.Log and t.Error output), and
# panics and timeouts, at most 80 lines.
failed_tests() {
	awk '
		/^[ \t]*--- FAIL/ { keep = 1; print; next }
		/^(panic:|fatal error:)/ { keep = 1; print; next }
		keep && /^[ \t]/ { print; next }
		{ keep = 0 }
		/^FAIL[ \t]/ { print }
	' "$test_log" | head -n 80
}

# Every `func FuzzXxx(f *testing.F)` in a _test.go file, as "dir FuzzXxx".
fuzz_targets() {
	grep -rEo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*\(' . |
		sed -E 's#^(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\($#\1 \2#' |
		sort -u
}

# links_caddy DIR: whether DIR's test binary links Caddy's packages.
links_caddy() {
	# grep reads it all: with -q, go list could die of SIGPIPE, and pipefail
	# would make the answer no.
	go list -deps -test "$1" | grep -Fx github.com/caddyserver/caddy/v2 >/dev/null
}

run_fuzz() {
	local targets rc=0 n=0 dir name
	targets=$(fuzz_targets)
	if [ -z "$targets" ]; then
		echo "fuzz: no Fuzz targets found"
		return 0
	fi
	while read -r dir name; do
		if [ "$FUZZ_ALL" != 1 ] && links_caddy "$dir"; then
			echo "--- fuzz $name in $dir: seed corpus only (run by the test step; FUZZ_ALL=1 fuzzes it)"
			continue
		fi
		n=$((n + 1))
		echo "--- fuzz $name in $dir for $FUZZTIME"
		if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" "$dir"; then
			echo "--- fuzz $name in $dir FAILED (a failing input is saved under $dir/testdata/fuzz/$name)" >&2
			rc=1
		fi
	done <<<"$targets"
	echo "fuzz: ran $n target(s)"
	return $rc
}

echo "test.sh: $(go version), CI=$CI"
step deps install_deps
step gofmt check_gofmt
# vet and staticcheck compile with CGO_ENABLED=0, as scripts/run.sh and xcaddy
# build Caddy, so that the examples' and xcaddy's builds reuse what they
# compiled instead of compiling Caddy's ~1,000 packages again.
step vet env CGO_ENABLED=0 go vet ./...
step staticcheck run_staticcheck
step test run_tests
step fuzz run_fuzz
step xcaddy bash scripts/xcaddy-check.sh
step example bash scripts/example-check.sh

echo
echo "=== summary ($((SECONDS - start_all))s in all)"
printf '    %s\n' "${timings[@]}"
if [ ${#failed[@]} -gt 0 ]; then
	if [[ " ${failed[*]} " == *" test "* ]]; then
		echo
		echo "=== what failed in the test step"
		failed_tests
	fi
	echo "test.sh: FAILED step(s): ${failed[*]}" >&2
	exit 1
fi
echo "test.sh: all steps passed"
