#!/usr/bin/env bash
# Proves the README's xcaddy line for a local checkout works as written: it
# takes the `xcaddy build ... =.` line from README.md, runs it verbatim in
# this checkout with xcaddy on PATH, and checks that the Caddy it builds lists
# the http.handlers.rate_limit module.
#
# xcaddy is pinned to v0.4.7 and installed as a `go tool` in a throwaway
# module (the module proxy here refuses `go install` of xcaddy: it cannot
# list its versions), so nothing is installed globally and the project's
# go.mod is untouched.
set -euo pipefail

XCADDY_VERSION=${XCADDY_VERSION:-v0.4.7}

# xcaddy's default build adds -trimpath and -tags nobadger,nomysql,nopgx to
# `go build`, which make Go compile every one of Caddy's ~1,000 packages again
# (minutes on 2 cores) instead of reusing what scripts/test.sh's vet step
# compiled in the same build cache, with the same CGO_ENABLED=0 that xcaddy
# sets. The link flags stay xcaddy's; set XCADDY_GO_BUILD_FLAGS (even to " ")
# to build another way.
export XCADDY_GO_BUILD_FLAGS=${XCADDY_GO_BUILD_FLAGS:-"-ldflags '-w -s'"}

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

line=$(grep -E '^xcaddy build v[^ ]+ --with github\.com/zonelimit/caddy-ratelimit@[^ ]+=\.$' "$repo/README.md" | head -n 1)
if [ -z "$line" ]; then
	echo "xcaddy-check: FAIL: no 'xcaddy build ... --with ...=.' line in README.md" >&2
	exit 1
fi
mkdir -p "$tmp/bin"
(cd "$tmp/tools" && quiet go build -o "$tmp/bin/xcaddy" github.com/caddyserver/xcaddy/cmd/xcaddy)

echo "xcaddy-check: in the checkout, as README.md says: $line"
if [ -e "$repo/caddy" ]; then
	mv "$repo/caddy" "$tmp/caddy.saved"
	trap 'mv "$tmp/caddy.saved" "$repo/caddy"; cleanup' EXIT
fi
(
	cd "$repo"
	PATH="$tmp/bin:$PATH" quiet bash -c "$line"
)
mv "$repo/caddy" "$tmp/caddy"
"$tmp/caddy" version

echo "xcaddy-check: checking the module is listed"
if ! "$tmp/caddy" list-modules | grep -Fx 'http.handlers.rate_limit'; then
	echo "xcaddy-check: FAIL: http.handlers.rate_limit not in $tmp/caddy list-modules" >&2
	exit 1
fi
echo "xcaddy-check: OK"
