#!/usr/bin/env bash
# Runs every Go fuzz target of the module for a short while (FUZZTIME, 5s by
# default). Targets are discovered from the source, so a new Fuzz function is
# covered without editing this script.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-5s}
count=0
while IFS=: read -r file _ fn; do
  name=$(sed -E 's/^func (Fuzz[A-Za-z0-9_]*).*/\1/' <<<"$fn")
  pkg=$(dirname "$file")
  echo "fuzz: $pkg $name ($fuzztime)"
  go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg" >/tmp/paygate-fuzz.log 2>&1 || { cat /tmp/paygate-fuzz.log; exit 1; }
  count=$((count + 1))
done < <(grep -rn --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]*\(' . | grep -v '/node_modules/' | sort)
echo "fuzz: $count targets ran without a finding"
