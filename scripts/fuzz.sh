#!/usr/bin/env bash
# Runs every fuzz target of the module (or those whose package or name
# matches PATTERN) for real — coverage-guided, not only the seed corpus that
# `go test` runs — FUZZTIME each, and prints one line per target: package,
# target, executions, new interesting inputs, corpus size, and the result.
# A crash stops nothing else: the failing input is written by `go test` under
# the package's testdata/fuzz/<Target>/ (commit it with the fix).
#
# What the fuzzer found interesting (kept by `go test` in the build cache) is
# copied into testdata/fuzz/<Target>/ as well — at most FUZZKEEP inputs per
# target (64), the smallest first, none over 16 KiB — so that `make test`
# replays it as seeds and the next run starts from it. Commit what you keep.
#
# Usage: scripts/fuzz.sh [PATTERN]   (FUZZTIME=30s, FUZZKEEP=64, FUZZPARALLEL=GOMAXPROCS)
set -uo pipefail
cd "$(dirname "$0")/.."
pattern=${1:-.}
fuzztime=${FUZZTIME:-30s}
keep=${FUZZKEEP:-64}
parallel=${FUZZPARALLEL:-}
cache=$(go env GOCACHE)/fuzz
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
failed=0

# keep_corpus MOD REL PKG TARGET copies the target's cached corpus into the
# package's testdata/fuzz/TARGET (bounded) and prints how many inputs that
# directory holds now.
keep_corpus() {
  local importpath src dst
  importpath=$(go list -C "$1" "$2" 2>/dev/null) || { echo -; return; }
  src=$cache/$importpath/$4
  dst=${3#./}/testdata/fuzz/$4
  if [ -d "$src" ]; then
    mkdir -p "$dst"
    find "$src" -maxdepth 1 -type f -size -16k -printf '%s %p\n' | sort -n | head -n "$keep" |
      while read -r _ f; do [ -e "$dst/$(basename "$f")" ] || cp "$f" "$dst/"; done
    rmdir "$dst" 2>/dev/null
  fi
  if [ -d "$dst" ]; then find "$dst" -maxdepth 1 -type f | wc -l; else echo 0; fi
}
printf '%-42s %-32s %12s %8s %7s %5s %s\n' package target execs new corpus kept result
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
  if go test -C "$mod" -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" ${parallel:+-parallel "$parallel"} "$rel" >"$out" 2>&1; then
    result=ok
  elif ! grep -q 'Failing input written to' "$out" && grep -q '^    context deadline exceeded$\|^context deadline exceeded$' "$out" &&
    go test -C "$mod" -count=1 -run "^${target}\$" "$rel" >"$out.replay" 2>&1; then
    # Go's coordinator can fail a target at the -fuzztime boundary on a
    # busy machine with nothing found (go.dev/issue/75804, fixed in Go
    # 1.27): no input was written and the corpus replays clean.
    result=ok-go75804
  else
    result=FAIL
    failed=1
  fi
  last=$(grep -E '^fuzz: elapsed' "$out" | tail -n 1)
  execs=$(sed -nE 's/.*execs: ([0-9]+).*/\1/p' <<<"$last")
  new=$(sed -nE 's/.*new interesting: ([0-9]+).*/\1/p' <<<"$last")
  corpus=$(sed -nE 's/.*\(total: ([0-9]+)\).*/\1/p' <<<"$last")
  kept=$(keep_corpus "$mod" "$rel" "$pkg" "$target")
  printf '%-42s %-32s %12s %8s %7s %5s %s\n' "$pkg" "$target" "${execs:--}" "${new:--}" "${corpus:--}" "$kept" "$result"
  if [ "$result" = FAIL ]; then sed -n '1,40p' "$out" | sed 's/^/    /'; fi
done < <(grep -rHoE '^func (Fuzz[A-Za-z0-9_]+)' --include='*_test.go' internal cmd sdk api 2>/dev/null | sed -E 's/func //' | sort -u)
exit $failed
