#!/bin/bash
# burst.sh BINDIR LABEL PORT [POOL] [N] [TRACE]: a burst of N concurrent
# creates (default 50) from a full warm pool of POOL (default 50) minimal ns
# 1x256 sandboxes (docs/PERFORMANCE.md, "a burst from the warm pool"). Runs
# `BINDIR/space server --dev` on a fresh data dir, waits until the pool is
# full (and 5 s more), then `space bench create --runtime ns --memory 256
# --count N --concurrency N`: p50/p90/p99 and the machine's CPU per create
# (the whole machine, other load included); then, the pool refilled, the
# same burst from burst-tree.py, which reads the CPU of the server's process
# tree (server with its node, node-manager, bridges, guests) just before the
# first request and after the last answer. With TRACE a file name, the
# server's execution trace over the burst is written there (read it with
# `go tool trace -pprof=sync TRACE`), or with PPROF=profile its CPU profile
# (`go tool pprof -top TRACE`). Compare builds by interleaving runs:
#   for r in 1 2; do for v in old new; do scripts/burst.sh /tmp/burst-$v $v 18099; done; done
set -u
B=$1; v=$2; port=$3; POOL=${4:-50}; N=${5:-50}; TRACE=${6:-}
D=$(mktemp -d /tmp/burst-$v.XXXXXX)
$B/space server --dev --data-dir $D --listen 127.0.0.1:$port --no-base-template --kernel-build off \
	--warm-pool minimal:ns:1x256=$POOL > $D/server.log 2>&1 &
spid=$!
export SPACE_API_URL=http://127.0.0.1:$port
for i in $(seq 1 600); do [ -s $D/admin.key ] && SPACE_API_KEY=$(cat $D/admin.key) $B/space nodes list >/dev/null 2>&1 && break; sleep 0.5; done
export SPACE_API_KEY=$(cat $D/admin.key)
full() {
	for i in $(seq 1 600); do
		[ "$($B/space nodes list -o json | grep -o '"ready": *[0-9]*' | head -1 | grep -o '[0-9]*$')" = "$POOL" ] && { sleep 5; return 0; }
		sleep 1
	done
	echo "$v: the warm pool did not fill" >&2; return 1
}
if full; then
	if [ -n "$TRACE" ]; then
		curl -s -H "Authorization: Bearer $SPACE_API_KEY" -o $TRACE "$SPACE_API_URL/debug/pprof/${PPROF:-trace}?seconds=2" &
		tpid=$!; sleep 0.3
	fi
	load=$(cut -d' ' -f1 /proc/loadavg)
	$B/space bench create --runtime ns --memory 256 --count $N --concurrency $N -o json > $D/bench.json
	read -r tree tp50 tp99 < <(full && $(dirname $0)/burst-tree.py $SPACE_API_URL $SPACE_API_KEY $N $spid)
	python3 -c "import json,sys; d=json.load(open(sys.argv[1])); c=d['scenarios']['create']; print('$v burst: p50 %.1f p90 %.1f p99 %.1f ms, machine CPU %s ms/create; server tree CPU $tree ms/create (REST burst p50 $tp50 p99 $tp99 ms); load $load; %s' % (c['p50_ms'], c['p90_ms'], c['p99_ms'], c.get('cpu_ms_per_op'), d.get('notes',{}).get('create','')))" $D/bench.json
	[ -n "$TRACE" ] && wait $tpid
fi
kill -TERM $spid; wait $spid
rm -rf "$D"
