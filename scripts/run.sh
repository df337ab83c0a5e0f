#!/usr/bin/env bash
# Builds Caddy with the rate_limit module (./cmd/caddy, the program xcaddy
# generates) into ./bin/caddy and runs it on Caddyfile.example, which uses the
# in-memory store: nothing but Go is needed.
#
#   bash scripts/run.sh                     # Caddyfile.example
#   bash scripts/run.sh --config my.Caddyfile
#
# Extra arguments are passed to `caddy run` after the defaults (a later
# --config wins).
set -euo pipefail

if ! command -v go >/dev/null 2>&1; then
	export PATH="$PATH:/usr/local/go/bin"
fi
if ! command -v go >/dev/null 2>&1; then
	echo "run.sh: Go is not installed (looked on PATH and in /usr/local/go/bin)" >&2
	exit 1
fi

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The first build downloads Caddy's modules and compiles about 1,000
# packages (the standard library's included): a few minutes on 2 cores. go build -v names each package as it
# is compiled; a line every 25 shows that it progresses.
echo "run.sh: building ./cmd/caddy into bin/caddy (the first build takes a few minutes; later ones seconds)"
mkdir -p bin
# CGO_ENABLED=0, as Caddy's releases and xcaddy build it: a static binary, and
# no C compiler needed.
CGO_ENABLED=${CGO_ENABLED:-0} go build -v -o bin/caddy ./cmd/caddy 2>&1 | awk '
	/^go: downloading/ { print "run.sh: " $0; fflush(); next }
	/^[a-z0-9.-]+(\/[^ ]*)?$/ { n++; if (n % 25 == 0) { printf "run.sh: compiled %d packages...\n", n; fflush() } next }
	{ print }'
echo "run.sh: built bin/caddy"

echo "run.sh: bin/caddy run --config Caddyfile.example --adapter caddyfile $*"
exec bin/caddy run --config Caddyfile.example --adapter caddyfile "$@"
