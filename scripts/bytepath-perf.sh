#!/bin/bash
# bytepath-perf.sh BINDIR LABEL PORT [N]: perf profiles of the three processes
# on the files byte path — server (control plane + node-api), host bridge and
# guest daemon — during N (default 8) writes of a 100 MiB file through the
# REST API (each replacing the last), then N reads of it (docs/PERFORMANCE.md,
# "files at 1 GiB/s"). Writes /tmp/bytepath-perf-LABEL-{put,get}.data and
# prints the wall time per operation and each process's share of the samples;
# read one process with
#   perf report -i /tmp/bytepath-perf-LABEL-put.data --comm space-guest --children --sort sym -g none
# `make build` strips space-guest (-s -w): for its symbols, rebuild it into
# BINDIR without them first:
#   CGO_ENABLED=0 go build -tags osusergo,netgo -trimpath -o BINDIR/space-guest ./cmd/space-guest
# Runs `BINDIR/space server --dev` on a fresh data dir, one ns sandbox; deletes
# the sandbox and stops the server at the end.
set -u
B=$1; v=$2; port=$3; N=${4:-8}
command -v perf >/dev/null || { echo "bytepath-perf.sh: perf is not installed (apt-get install linux-perf)" >&2; exit 1; }
D=$(mktemp -d /tmp/bytepath-perf-$v.XXXXXX)
$B/space server --dev --data-dir $D --listen 127.0.0.1:$port --no-base-template --default-runtime ns > $D/server.log 2>&1 &
spid=$!
trap 'kill -TERM $spid 2>/dev/null; wait $spid 2>/dev/null; rm -rf $D' EXIT
export SPACE_API_URL=http://127.0.0.1:$port
for i in $(seq 1 600); do [ -s $D/admin.key ] && SPACE_API_KEY=$(cat $D/admin.key) $B/space template list 2>/dev/null | grep -q minimal && break; sleep 0.5; done
export SPACE_API_KEY=$(cat $D/admin.key)
sb=$($B/space sandbox create --runtime ns --template minimal) || exit 1
bridge=$(pgrep -P $spid -f "space-host-bridge --exec-id $sb" | head -1)
nm=$(pgrep -P $spid -f space-node-manager | head -1)
guest=$(pgrep -P $nm space-guest | tail -1)
head -c 100M /dev/urandom > $D/file
url=$SPACE_API_URL/v1/sandboxes/$sb
auth="Authorization: Bearer $SPACE_API_KEY"
put() { curl -sf -o /dev/null -H "$auth" -H 'Expect:' -T $D/file "$url/files?path=/tmp/bytepath"; }
get() { curl -sf -o /dev/null -H "$auth" "$url/files?path=/tmp/bytepath"; }
put # the file exists: every profiled write replaces it
for op in put get; do
	out=/tmp/bytepath-perf-$v-$op.data
	perf record -q -F 2000 -g -o $out -p $spid,$bridge,$guest -- sleep 3600 2>/dev/null &
	ppid=$!
	sleep 1
	t0=$(date +%s%N)
	for i in $(seq 1 $N); do $op || { echo "$op failed" >&2; kill -INT $ppid; exit 1; }; done
	t1=$(date +%s%N)
	kill -INT $ppid
	wait $ppid
	echo "$v $op: wall $(((t1 - t0) / 1000000 / N)) ms/op; samples by process:"
	perf report -i $out --no-children --sort comm -q -g none 2>/dev/null | sed 's/^/  /'
done
$B/space sandbox delete $sb
