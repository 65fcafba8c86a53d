#!/usr/bin/env bash
# Builds the Temporal CLI pinned in tools/go.mod into .cache/bin/temporal.
#
# The build takes several minutes, so it only runs when the binary is missing or
# tools/go.mod / tools/go.sum changed since the cached build. A stamp next to the
# binary (.cache/bin/temporal.stamp) records the sha256 of those two files.
#
# A binary without a matching stamp (built by hand, or the pins changed in a way
# that does not touch it, e.g. a go.sum cleanup) is kept if the module versions
# embedded in it are exactly the ones tools/go.mod selects; otherwise it is rebuilt.
#
# Usage: tools/build-temporal.sh [--force]   (works from any directory)
set -euo pipefail

say() { printf 'build-temporal: %s\n' "$*"; }
die() { printf 'build-temporal: error: %s\n' "$*" >&2; exit 1; }

force=0
case "${1:-}" in
  "") ;;
  -f|--force) force=1 ;;
  -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) die "unknown argument: $1 (usage: $0 [--force])" ;;
esac

command -v go >/dev/null 2>&1 || die "go is not on PATH"

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools="$repo/tools"
bin_dir="$repo/.cache/bin"
bin="$bin_dir/temporal"
stamp="$bin.stamp"
pkg=github.com/temporalio/cli/cmd/temporal

[ -f "$tools/go.mod" ] && [ -f "$tools/go.sum" ] || die "missing $tools/go.mod or go.sum"
mkdir -p "$bin_dir"

# One build at a time: a second caller waits, then finds the fresh stamp.
if command -v flock >/dev/null 2>&1; then
  exec 9>"$bin_dir/.build-temporal.lock"
  if ! flock -n 9; then
    say "another build is running; waiting for it"
    flock 9
  fi
fi

inputs=$(cat "$tools/go.mod" "$tools/go.sum" | sha256sum | cut -d' ' -f1)

write_stamp() {
  printf 'inputs %s\n# sha256 of tools/go.mod + tools/go.sum; %s; %s\n' \
    "$inputs" "$(go version)" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$stamp"
}

# built_from_pins succeeds when every module linked into the binary has the
# version that tools/go.mod selects (so a rebuild would link the same code).
built_from_pins() {
  local linked selected
  linked=$(go version -m "$bin" 2>/dev/null | awk '$1 == "mod" || $1 == "dep" { print $2, $3 } $1 == "=>" { print "replaced" }') || return 1
  [ -n "$linked" ] || return 1
  case "$linked" in *replaced*) return 1 ;; esac
  printf '%s\n' "$linked" | grep -q "^github.com/temporalio/cli " || return 1
  selected=$(cd "$tools" && go list -m -f '{{.Path}} {{.Version}}' all 2>/dev/null) || return 1
  [ -z "$(comm -23 <(printf '%s\n' "$linked" | sort -u) <(printf '%s\n' "$selected" | sort -u))" ]
}

if [ "$force" = 0 ] && [ -x "$bin" ]; then
  if [ -f "$stamp" ] && [ "$(sed -n 's/^inputs //p' "$stamp")" = "$inputs" ]; then
    say "up to date: $bin (tools/go.mod+go.sum sha256 ${inputs:0:12})"
    exit 0
  fi
  say "no stamp for tools/go.mod+go.sum sha256 ${inputs:0:12}; checking the module versions linked into $bin"
  if built_from_pins; then
    write_stamp
    say "kept $bin: it links exactly the modules tools/go.mod selects; stamp written"
    exit 0
  fi
  say "$bin was built from other pins; rebuilding"
elif [ "$force" = 1 ]; then
  say "--force: rebuilding"
else
  say "$bin is missing; building"
fi

cli_version=$(cd "$tools" && go list -m -f '{{.Version}}' github.com/temporalio/cli) || die "cannot resolve github.com/temporalio/cli in $tools/go.mod"
tmp="$bin_dir/.temporal.tmp.$$"
trap 'rm -f "$tmp"' EXIT
say "go build $pkg@$cli_version with $(go version | cut -d' ' -f3) (takes several minutes on 2 cores)"
start=$(date +%s)
(cd "$tools" && go build -o "$tmp" "$pkg") || die "go build failed"
"$tmp" --version >/dev/null || die "the built binary does not run"
mv -f "$tmp" "$bin"
write_stamp
say "built $bin in $(($(date +%s) - start))s: $("$bin" --version)"
