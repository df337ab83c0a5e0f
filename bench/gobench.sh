#!/usr/bin/env bash
# Go micro-benchmarks: every Benchmark in the algorithms, store and redisstore
# packages (ns/op, B/op, allocs/op), serial and parallel as the benchmarks
# define them. No tests run (-run '^$').
#
#   bash bench/gobench.sh                         # all of them
#   bash bench/gobench.sh -benchtime 2s -count 5  # extra flags go to go test
#   PKGS="./store" bash bench/gobench.sh          # some packages only
#   BENCH=Parallel bash bench/gobench.sh          # -bench regexp (default .)
#
# Output is also written to bench/results/gobench-<time>.txt (gitignored), in
# the format benchstat reads.
set -euo pipefail

if ! command -v go >/dev/null 2>&1; then
	export PATH="$PATH:/usr/local/go/bin"
fi
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ -z "${PKGS:-}" ]; then
	PKGS=""
	for d in algorithms store redisstore; do
		# only packages that exist and have benchmarks
		if [ -d "$d" ] && grep -rqs --include='*_test.go' '^func Benchmark' "$d"; then
			PKGS+="./$d/... "
		fi
	done
fi
if [ -z "$PKGS" ]; then
	echo "gobench: no benchmarks found in algorithms/, store/ or redisstore/" >&2
	exit 1
fi

mkdir -p bench/results
out=bench/results/gobench-$(date -u +%Y%m%dT%H%M%SZ).txt
echo "gobench: go test -run '^\$' -bench '${BENCH:-.}' -benchmem $* $PKGS"
# shellcheck disable=SC2086
go test -run '^$' -bench "${BENCH:-.}" -benchmem "$@" $PKGS | tee "$out"
echo "gobench: written to $out"
