#!/bin/sh
# vm-restore-again.sh OLD.test NEW.test BTRFSDIR ROUNDS SIZES...
# Interleaved rounds of vm.BenchmarkRestoreAgain (one full snapshot restored
# again and again) for two builds of the vm driver's test binary, with the
# state on the btrfs at BTRFSDIR (RAM files on). Build each with
#   (cd internal/driver/vm && go test -c -o /tmp/X.test .)
# in its worktree (copy restoreagain_bench_test.go into an older one).
# Prints one line per restore: build, size, round and the driver's times.
set -eu
old=$1 new=$2 dir=$3 rounds=$4
shift 4
: "${SPACE_TEST_CACHE_DIR:=/var/cache/space}"
export SPACE_TEST_CACHE_DIR
cd "$(dirname "$0")/../internal/driver/vm"
r=1
while [ "$r" -le "$rounds" ]; do
	for mib in "$@"; do
		for b in old new; do
			eval bin=\$$b
			TMPDIR=$dir SPACE_BENCH_CHECKPOINT_MIB=$mib "$bin" -test.run '^$' \
				-test.bench 'BenchmarkRestoreAgain$' -test.benchtime 3x 2>&1 |
				sed -n "s/.*restoreagain_bench_test.go:[0-9]*: /$b round $r: /p"
		done
	done
	r=$((r + 1))
done
