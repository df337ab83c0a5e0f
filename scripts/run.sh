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

echo "run.sh: building ./cmd/caddy into bin/caddy"
mkdir -p bin
go build -o bin/caddy ./cmd/caddy

echo "run.sh: bin/caddy run --config Caddyfile.example --adapter caddyfile $*"
exec bin/caddy run --config Caddyfile.example --adapter caddyfile "$@"
