#!/usr/bin/env bash
# Proves the README's user line works:
#   xcaddy build --with github.com/zonelimit/caddy-ratelimit
# by building Caddy with xcaddy against this checkout and checking that the
# resulting binary lists the http.handlers.rate_limit module.
#
# xcaddy is pinned to v0.4.7 (the module proxy here refuses newer ones) and
# installed as a `go tool` in a throwaway module, so nothing is installed
# globally and the project's go.mod is untouched.
set -euo pipefail

XCADDY_VERSION=${XCADDY_VERSION:-v0.4.7}
CADDY_VERSION=${CADDY_VERSION:-v2.11.9}
MODULE=github.com/zonelimit/caddy-ratelimit

if ! command -v go >/dev/null 2>&1; then
	export PATH="$PATH:/usr/local/go/bin"
fi

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/xcaddy-check.XXXXXX")
cleanup() { chmod -R u+w "$tmp" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
log=$tmp/xcaddy.log

# quiet CMD...: runs CMD with its (long) output in $log, shown only on failure.
quiet() {
	if ! "$@" >>"$log" 2>&1; then
		cat "$log" >&2
		echo "xcaddy-check: FAIL: $*" >&2
		return 1
	fi
}

echo "xcaddy-check: installing xcaddy $XCADDY_VERSION in a throwaway module"
mkdir -p "$tmp/tools"
(
	cd "$tmp/tools"
	quiet go mod init xcaddy-check.local/tools
	quiet go get -tool "github.com/caddyserver/xcaddy/cmd/xcaddy@$XCADDY_VERSION"
	quiet go tool xcaddy version
)

echo "xcaddy-check: xcaddy build $CADDY_VERSION --with $MODULE=$repo"
# A replacement needs a version on the left of '='; the zero pseudo-version
# is what `go` itself writes for a module that has none.
(
	cd "$tmp/tools"
	quiet go tool xcaddy build "$CADDY_VERSION" \
		--with "$MODULE@v0.0.0-00010101000000-000000000000=$repo" \
		--output "$tmp/caddy"
)
"$tmp/caddy" version

echo "xcaddy-check: checking the module is listed"
if ! "$tmp/caddy" list-modules | grep -Fx 'http.handlers.rate_limit'; then
	echo "xcaddy-check: FAIL: http.handlers.rate_limit not in $tmp/caddy list-modules" >&2
	exit 1
fi
echo "xcaddy-check: OK"
