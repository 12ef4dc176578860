#!/bin/bash
# neighbour-latency.sh [ROUNDS] [RUNTIMES]: what a hostile sandbox costs its
# neighbour (catalogue C-1, C-4, C-5; docs/SECURITY.md, docs/PERFORMANCE.md):
# the p99 exec latency of a quiet sandbox of one CPU alone, then beside a
# sandbox of one CPU spinning on four threads, running a fork bomb, and
# opening connections without end, each as a ratio to the idle p99 of the
# same round (the goal is at most 2). The setup is e2e's
# BenchmarkNeighbourExec (a real server, node and node-manager on a fresh data
# directory, 100 execs of `true` per phase); this script builds its test
# binary once and runs it ROUNDS times (default 3) per runtime, the runtimes
# (default "ns vm"; vm boots under TCG where /dev/kvm cannot run guests)
# interleaved round by round, and prints one line per round and a summary.
# Run as root from the repository root:
#   SPACE_TEST_CACHE_DIR=/var/cache/space scripts/neighbour-latency.sh 3 "ns vm"
set -eu
ROUNDS=${1:-3}
RUNTIMES=${2:-ns vm}
root=$(cd "$(dirname "$0")/.." && pwd)
D=$(mktemp -d /tmp/neighbour-latency.XXXXXX)
trap 'rm -rf "$D"' EXIT
(cd "$root/e2e" && go test -c -o "$D/e2e.test" .)
printf '%-3s %-3s %-16s %-22s %-22s %-22s\n' rt round "idle p50/p99 ms" "spin p99 ms (×idle)" "forkbomb p99 (×idle)" "connflood p99 (×idle)"
for r in $(seq 1 "$ROUNDS"); do
	for rt in $RUNTIMES; do
		out=$D/$rt-$r.txt
		# The test binary builds the platform's binaries from the tree (its
		# TestMain): it runs from e2e/.
		if ! (cd "$root/e2e" && SPACE_BENCH_RUNTIME=$rt "$D/e2e.test" -test.run '^$' -test.bench 'NeighbourExec$' -test.benchtime 1x) >"$out" 2>&1; then
			echo "$rt round $r: the benchmark failed:" >&2
			grep -v '^        time=' "$out" | tail -20 >&2
			exit 1
		fi
		line=$(grep '^BenchmarkNeighbourExec' "$out" | tail -1)
		metric() { awk -v m="$1" '{for (i = 2; i < NF; i++) if ($(i+1) == m) print $i}' <<<"$line"; }
		printf '%-3s %-3s %-16s %-22s %-22s %-22s\n' "$rt" "$r" \
			"$(metric idle-p50-ms)/$(metric idle-p99-ms)" \
			"$(metric spin-p99-ms) ($(metric spin-p99/idle))" \
			"$(metric forkbomb-p99-ms) ($(metric forkbomb-p99/idle))" \
			"$(metric connflood-p99-ms) ($(metric connflood-p99/idle))"
		echo "$rt $(metric spin-p99/idle) $(metric forkbomb-p99/idle) $(metric connflood-p99/idle)" >>"$D/ratios"
	done
done
echo "p99/idle over $ROUNDS rounds (min, median — the lower of the two middle ones for an even count —, max):"
for rt in $RUNTIMES; do
	for col in 2 3 4; do
		name=$(echo "spin forkbomb connflood" | cut -d' ' -f$((col - 1)))
		awk -v rt="$rt" -v c="$col" '$1 == rt {print $c}' "$D/ratios" | sort -g |
			awk -v rt="$rt" -v name="$name" '{v[NR] = $1} END {printf "%s %-9s %.2f %.2f %.2f\n", rt, name, v[1], v[int((NR + 1) / 2)], v[NR]}'
	done
done
