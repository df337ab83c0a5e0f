#!/usr/bin/env bash
# Runs the Go test suite (go test -race -count=1 ./...) several times in a
# row while busy loops keep every core loaded, to show that no test depends
# on a quiet machine. Stops at the first failing run.
#
#   bash scripts/stress.sh            # 3 runs, one busy loop per core
#   RUNS=5 BUSY=4 bash scripts/stress.sh
set -uo pipefail

RUNS=${RUNS:-3}
BUSY=${BUSY:-$(nproc)}
TEST_TIMEOUT=${TEST_TIMEOUT:-30m}
export CI=${CI:-true}

if ! command -v go >/dev/null 2>&1; then
	export PATH="$PATH:/usr/local/go/bin"
fi
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1

pids=()
stop() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
}
trap stop EXIT
for _ in $(seq "$BUSY"); do
	(while :; do :; done) &
	pids+=($!)
done
echo "stress: $BUSY busy loops running; load: $(cut -d' ' -f1-3 /proc/loadavg)"

for i in $(seq "$RUNS"); do
	t0=$SECONDS
	echo "=== stress run $i of $RUNS"
	if ! CGO_ENABLED=1 go test -race -count=1 -timeout "$TEST_TIMEOUT" ./...; then
		echo "stress: run $i FAILED after $((SECONDS - t0))s (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
		exit 1
	fi
	echo "stress: run $i passed in $((SECONDS - t0))s (load $(cut -d' ' -f1-3 /proc/loadavg))"
done
echo "stress: $RUNS runs passed with $BUSY busy loops"
