#!/usr/bin/env bash
# Runs every fuzz target of the module (or those whose package or name
# matches PATTERN) for real — coverage-guided, not only the seed corpus that
# `go test` runs — FUZZTIME each, and prints one line per target: package,
# target, executions, new interesting inputs, corpus size, and the result.
# A crash stops nothing else: the failing input is written by `go test` under
# the package's testdata/fuzz/<Target>/ (commit it with the fix).
#
# Usage: scripts/fuzz.sh [PATTERN]        (FUZZTIME=30s by default)
set -uo pipefail
cd "$(dirname "$0")/.."
pattern=${1:-.}
fuzztime=${FUZZTIME:-30s}
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
failed=0
printf '%-42s %-32s %12s %8s %7s %s\n' package target execs new corpus result
while IFS=: read -r file target; do
  pkg=./$(dirname "$file")
  echo "$pkg $target" | grep -Eq -- "$pattern" || continue
  # sdk/go and api are modules of their own: run from their root.
  mod=.
  for m in sdk/go api; do
    case $pkg in ./$m|./$m/*) mod=$m ;; esac
  done
  rel=./${pkg#./"$mod"}; rel=${rel/#.\/\//./}
  out=$log/$target.log
  if go test -C "$mod" -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$rel" >"$out" 2>&1; then
    result=ok
  else
    result=FAIL
    failed=1
  fi
  last=$(grep -E '^fuzz: elapsed' "$out" | tail -n 1)
  execs=$(sed -nE 's/.*execs: ([0-9]+).*/\1/p' <<<"$last")
  new=$(sed -nE 's/.*new interesting: ([0-9]+).*/\1/p' <<<"$last")
  corpus=$(sed -nE 's/.*\(total: ([0-9]+)\).*/\1/p' <<<"$last")
  printf '%-42s %-32s %12s %8s %7s %s\n' "$pkg" "$target" "${execs:--}" "${new:--}" "${corpus:--}" "$result"
  if [ "$result" = FAIL ]; then sed -n '1,40p' "$out" | sed 's/^/    /'; fi
done < <(grep -rHoE '^func (Fuzz[A-Za-z0-9_]+)' --include='*_test.go' internal cmd sdk api 2>/dev/null | sed -E 's/func //' | sort -u)
exit $failed
