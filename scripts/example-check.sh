#!/usr/bin/env bash
# Follows the README's quick start to the letter: starts `bash scripts/run.sh`
# (builds Caddy with the plugin and runs Caddyfile.example), then runs every
# recipe command written in Caddyfile.example's comments, exactly as written,
# and checks what each prints.
set -euo pipefail

if ! command -v go >/dev/null 2>&1; then
	export PATH="$PATH:/usr/local/go/bin"
fi
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# What each recipe command prints, in the order they appear.
expected=(
	"200 200 200 200 200 200 200 200 200 200 200 200 200 200 200 200 200 200 200 200 429 429 "
	"HTTP/1.1 429"
	"200 200 200 200 200 200 200 200 200 200 429 429 "
	"200 200 200 200 200 429 429 429 "
	"200 200 200 "
	"401 401 401 429 429 "
	"HTTP/1.1 429"
)

mapfile -t cmds < <(sed -n -E 's/^#     ((for i|curl) .*)$/\1/p' Caddyfile.example | sed -E 's/ +# .*$//')
if [ ${#cmds[@]} -ne ${#expected[@]} ]; then
	echo "example-check: found ${#cmds[@]} recipe commands in Caddyfile.example, expected ${#expected[@]}:" >&2
	printf '  %s\n' "${cmds[@]}" >&2
	exit 1
fi

log=$(mktemp "${TMPDIR:-/tmp}/example-check.XXXXXX")
bash scripts/run.sh >"$log" 2>&1 &
pid=$!
stop() {
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	rm -f "$log"
}
trap stop EXIT

for _ in $(seq 1800); do
	if curl -s -o /dev/null http://127.0.0.1:2019/config/ 2>/dev/null; then
		break
	fi
	if ! kill -0 "$pid" 2>/dev/null; then
		cat "$log" >&2
		echo "example-check: scripts/run.sh exited" >&2
		exit 1
	fi
	sleep 0.2
done
echo "example-check: Caddy runs Caddyfile.example"

rc=0
for i in "${!cmds[@]}"; do
	got=$(bash -c "${cmds[$i]}" 2>&1 || true)
	want=${expected[$i]}
	case "$got" in
	"$want"* | *"$want"*) echo "ok    ${cmds[$i]}" ;;
	*)
		echo "FAIL  ${cmds[$i]}" >&2
		echo "      got:  ${got:0:300}" >&2
		echo "      want: $want" >&2
		rc=1
		;;
	esac
done
if [ $rc -ne 0 ]; then
	echo "example-check: Caddy's log:" >&2
	tail -20 "$log" >&2
fi
exit $rc
