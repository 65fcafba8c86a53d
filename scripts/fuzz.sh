#!/usr/bin/env bash
# Runs every Go fuzz target of the module for a bounded number of executions
# (FUZZTIME, 20000x by default). Targets are discovered from the source, so a
# new Fuzz function is covered without editing this script.
#
# The budget is a count, not a duration: with a duration (-fuzztime 5s) the Go
# 1.26 fuzz coordinator can report a bare "context deadline exceeded" failure
# at the end of the window when its workers are starved of CPU
# (go.dev/issue/75804, fixed in Go 1.27); a count has no deadline to race. A
# real finding still fails the run and writes its input to testdata/fuzz.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-20000x}
count=0
while IFS=: read -r file _ fn; do
  name=$(sed -E 's/^func (Fuzz[A-Za-z0-9_]*).*/\1/' <<<"$fn")
  pkg=$(dirname "$file")
  echo "fuzz: $pkg $name ($fuzztime)"
  go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg" >/tmp/paygate-fuzz.log 2>&1 || { cat /tmp/paygate-fuzz.log; exit 1; }
  count=$((count + 1))
done < <(grep -rn --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]*\(' . | grep -v '/node_modules/' | sort)
echo "fuzz: $count targets ran without a finding"
