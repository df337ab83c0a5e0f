#!/usr/bin/env bash
# Runs Caddy's own tests and commands twice, as Caddy ships them and with this
# plugin linked in, and fails on any difference the plugin makes:
#
#   1. integration  Caddy's caddytest/integration suite (real in-process
#                   servers; its Caddyfile adapt fixtures too), copied from the
#                   module cache into a throwaway module; the plugin run has one
#                   more file that blank-imports the plugin
#   2. cmd          the tests of Caddy's cmd package, in a copy of Caddy's
#                   module (they are package caddycmd: they cannot be copied
#                   elsewhere). TestCommandsAreAvailable is skipped in both
#                   runs: it wants exactly Caddy's 17 core commands in the test
#                   binary, so linking anything that registers a command fails
#                   it, Caddy's own caddyhttp (respond) and caddypki (trust)
#                   included; step 3 checks the commands instead
#   3. binaries     a Caddy with modules/standard, with and without the plugin:
#                   `list-modules` and `help` may only gain the plugin's modules
#                   and its rate-limit command; `caddy adapt` of every adapt
#                   fixture must print the same in both
#
# Needs Go and the module proxy (Caddy's test dependencies). With a warm build
# cache it takes about two minutes. Caddy's integration tests listen on fixed
# ports (2999, 9080, 9443): do not run it while another program holds them
# (this repository's ./caddytest/ uses free ports of its own); it refuses to
# start if one of those ports is taken.
#
#   bash scripts/caddy-suite-check.sh
#   KEEP=1 bash scripts/caddy-suite-check.sh   # keep the work directory
set -euo pipefail

if ! command -v go >/dev/null 2>&1; then
	export PATH="$PATH:/usr/local/go/bin"
fi

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
plugin=$(cd "$repo" && go list -m)
caddy_version=$(cd "$repo" && go list -m -f '{{.Version}}' github.com/caddyserver/caddy/v2)
go_version=$(cd "$repo" && go list -m -f '{{.GoVersion}}')
caddy_dir=$(cd "$repo" && go mod download -json "github.com/caddyserver/caddy/v2@$caddy_version" | sed -n -E 's/^[[:space:]]*"Dir": "(.*)",?$/\1/p')
work=$(mktemp -d "${TMPDIR:-/tmp}/caddy-suite-check.XXXXXX")
cleanup() {
	local status=$?
	if [ -n "${KEEP:-}" ] || [ "$status" -ne 0 ]; then
		echo "caddy-suite-check: work directory kept: $work"
		return
	fi
	chmod -R u+w "$work" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
failed=0

say() { echo "caddy-suite-check: $*"; }
fail() {
	echo "caddy-suite-check: FAIL: $*" >&2
	failed=1
}

for port in 2999 9080 9443; do
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
		echo "caddy-suite-check: port $port is in use (another Caddy test suite running?); try again later" >&2
		exit 1
	fi
done

say "Caddy $caddy_version from $caddy_dir, plugin $plugin from $repo"
cd "$work"

# The copies. The integration tests import Caddy's internal/testmocks, which
# only Caddy's own module may import: it is copied too, under this module.
# _extra holds the files of the plugin runs (a leading _ hides it from go).
mkdir -p caddytest internal cmd/caddybase cmd/caddyplugin _extra
cp -r "$caddy_dir/caddytest/integration" caddytest/
find "$caddy_dir/caddytest" -maxdepth 1 -type f ! -name '*.go' -exec cp {} caddytest/ \;
cp -r "$caddy_dir/internal/testmocks" internal/
cp -r "$caddy_dir" caddy-src
chmod -R u+w .
sed -i 's#"github.com/caddyserver/caddy/v2/internal/testmocks"#"caddysuite.local/internal/testmocks"#' caddytest/integration/*.go

cat >cmd/caddybase/main.go <<'EOF'
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

func main() { caddycmd.Main() }
EOF
sed "s#^\t_ \"github.com/caddyserver/caddy/v2/modules/standard\"#&\n\t_ \"$plugin\"#" cmd/caddybase/main.go >_extra/main.go
printf 'package integration\n\nimport _ "%s"\n' "$plugin" >_extra/plugin_integration_test.go
printf 'package caddycmd_test\n\nimport _ "%s"\n' "$plugin" >_extra/plugin_cmd_test.go

# go.base.mod: Caddy alone; go.mod: Caddy and the plugin, so that the plugin
# run also gets whatever versions the plugin's requirements select.
# go.cmd*.mod: the same, with Caddy's module replaced by the copy.
say "resolving modules"
cat >go.mod <<EOF
module caddysuite.local

go $go_version

require github.com/caddyserver/caddy/v2 $caddy_version
EOF
cp "$repo/go.sum" go.sum
go mod tidy
cp go.mod go.base.mod
cp go.sum go.base.sum
cp _extra/plugin_integration_test.go caddytest/integration/
cp _extra/main.go cmd/caddyplugin/
go mod edit -require "$plugin@v0.0.0-00010101000000-000000000000" -replace "$plugin=$repo"
go mod tidy
rm caddytest/integration/plugin_integration_test.go
for v in base plugin; do
	src=go.mod
	[ "$v" = base ] && src=go.base.mod
	cp "$src" "go.cmd$v.mod"
	cp "${src%.mod}.sum" "go.cmd$v.sum"
	go mod edit -modfile="go.cmd$v.mod" -replace github.com/caddyserver/caddy/v2=./caddy-src
done
# Informational: modules whose version the plugin's requirements raise.
go list -modfile=go.base.mod -m all | LC_ALL=C sort >mods-base.txt
go list -m all | LC_ALL=C sort >mods-plugin.txt
LC_ALL=C join mods-base.txt mods-plugin.txt | awk '$2 != $3 { print "caddy-suite-check: the plugin raises " $1 " from " $2 " to " $3 }'

say "building"
go test -modfile=go.base.mod -c -o base.test ./caddytest/integration/
go build -modfile=go.base.mod -o caddy-base ./cmd/caddybase
cp _extra/plugin_integration_test.go caddytest/integration/
go test -c -o plugin.test ./caddytest/integration/
rm caddytest/integration/plugin_integration_test.go
go build -o caddy-plugin ./cmd/caddyplugin

# results FILE: the test results of a -test.v / -v run, one "RESULT name" a line.
results() { sed -n -E 's/^[[:space:]]*--- (PASS|FAIL|SKIP): ([^ ]+).*/\1 \2/p' "$1" | LC_ALL=C sort; }
# counts FILE: how many tests passed, failed and were skipped.
counts() { results "$1" | awk '{ n[$1]++ } END { printf "%d passed, %d failed, %d skipped\n", n["PASS"], n["FAIL"], n["SKIP"] }'; }
# differing A B: the top-level tests whose results differ between the runs
# A and B, as a -test.run pattern; empty if none do.
differing() {
	diff <(results "$1") <(results "$2") | sed -n -E 's#^[<>] [A-Z]+ ([^/]+).*#\1#p' | LC_ALL=C sort -u |
		paste -s -d '|' | sed -E 's/.+/^(&)$/' || true
}

# run_integration VARIANT ARGS...: Caddy's integration suite, with or
# without the plugin (VARIANT base or plugin).
run_integration() {
	local v=$1
	shift
	(cd caddytest/integration && "../../$v.test" -test.count=1 -test.v -test.timeout=10m "$@") || true
}
# run_cmd VARIANT ARGS...: the tests of Caddy's cmd package.
run_cmd() {
	local v=$1
	shift
	[ "$v" = plugin ] && cp _extra/plugin_cmd_test.go caddy-src/cmd/
	go test -modfile="go.cmd$v.mod" -count=1 -v -timeout=5m -skip '^TestCommandsAreAvailable$' "$@" \
		github.com/caddyserver/caddy/v2/cmd || true
	rm -f caddy-src/cmd/plugin_cmd_test.go
}

# suite NAME: runs run_NAME without and with the plugin and fails unless tests
# ran and got the same results. A test whose result differs runs again, in
# both, twice at most: Caddy's suite has tests that fail now and then on a
# loaded machine (or when another suite takes a port for a moment), with or
# without the plugin; only a difference that stays is reported.
suite() {
	local name=$1 v pattern attempt
	for v in base plugin; do
		say "$name, $v"
		"run_$name" "$v" >"$name-$v.out" 2>&1
		say "  $(counts "$name-$v.out")"
	done
	if [ -z "$(results "$name-base.out")" ]; then
		fail "$name: no test ran without the plugin (see $work/$name-base.out)"
		return
	fi
	pattern=$(differing "$name-base.out" "$name-plugin.out")
	for attempt in 1 2; do
		[ -n "$pattern" ] || return 0
		say "  $name: again, in both, the tests whose results differ: $pattern"
		for v in base plugin; do
			"run_$name" "$v" -test.run "$pattern" >"$name-$v.again$attempt.out" 2>&1
		done
		pattern=$(differing "$name-base.again$attempt.out" "$name-plugin.again$attempt.out")
	done
	if [ -n "$pattern" ]; then
		diff <(results "$name-base.again2.out") <(results "$name-plugin.again2.out") || true
		fail "$name: the results of $pattern differ with the plugin (< Caddy alone, > with the plugin; the output in $work)"
	fi
}

# 1. and 2.
suite integration
suite cmd

# 3. binaries
say "list-modules, help, adapt of every fixture"
./caddy-base list-modules >modules-base.txt 2>&1 || echo "exit status $?" >>modules-base.txt
./caddy-plugin list-modules >modules-plugin.txt 2>&1 || echo "exit status $?" >>modules-plugin.txt
# Lines only the plugin's binary prints must be its own modules, the count of
# non-standard modules or blank; nothing of Caddy's may go.
extra=$(diff modules-base.txt modules-plugin.txt | grep -E '^[<>]' |
	grep -v -E '^> ((admin\.api|http\.handlers)\.rate_limit|  Non-standard modules: [0-9]+|)$' || true)
if [ -n "$extra" ]; then
	fail "list-modules differs beyond the plugin's modules (< Caddy alone, > with the plugin):"$'\n'"$extra"
fi
./caddy-base help >help-base.txt 2>&1 || echo "exit status $?" >>help-base.txt
./caddy-plugin help >help-plugin.txt 2>&1 || echo "exit status $?" >>help-plugin.txt
extra=$(diff help-base.txt help-plugin.txt | grep -E '^[<>]' | grep -v -E '^>   rate-limit +[A-Z]' || true)
if [ -n "$extra" ]; then
	fail "caddy help differs beyond the rate-limit command (< Caddy alone, > with the plugin):"$'\n'"$extra"
fi
mkdir -p fixtures adapt-base adapt-plugin
nfix=0
for f in caddytest/integration/caddyfile_adapt/*.caddyfiletest; do
	n=$(basename "$f" .caddyfiletest)
	awk '/^----------$/ { exit } { print }' "$f" >"fixtures/$n.Caddyfile"
	nfix=$((nfix + 1))
done
# adapt_one BINARY OUTDIR FILE: what `caddy adapt` prints for FILE, and its
# exit status; the log lines' timestamps are all that may differ.
adapt_one() {
	{ "$1" adapt --config "$3" --adapter caddyfile 2>&1 || echo "exit status $?"; } |
		sed -E 's/"ts":[0-9.]+,//' >"$2/$(basename "$3").out"
}
export -f adapt_one
for v in base plugin; do
	# Caddy's start-up dominates each run: several at once.
	printf '%s\0' fixtures/*.Caddyfile | xargs -0 -n 1 -P 4 bash -c 'adapt_one "$@"' _ "./caddy-$v" "adapt-$v"
done
if ! diff -r adapt-base adapt-plugin; then
	fail "caddy adapt prints something else with the plugin for some fixtures (above)"
else
	say "  caddy adapt: the same output for all $nfix fixtures"
fi

if [ "$failed" -ne 0 ]; then
	exit 1
fi
say "OK: no difference with the plugin linked in"
