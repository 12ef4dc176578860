#!/bin/bash
# issue20-table.sh [BINDIR] [PORT]: remeasure issue 20's ns rows with one build (docs/PERFORMANCE.md,
# "issue 20's table, remeasured"): pool miss with baselines, exec, files, sustained, pool hit, burst.
set -u
B=${1:-bin}; port=${2:-18120}
run_server() { # $1 label, rest: extra flags
	local l=$1; shift
	D=$(mktemp -d /tmp/remeasure-$l.XXXXXX)
	$B/space server --dev --data-dir $D --listen 127.0.0.1:$port --no-base-template --kernel-build off "$@" > $D/server.log 2>&1 &
	spid=$!
	export SPACE_API_URL=http://127.0.0.1:$port
	for i in $(seq 1 600); do [ -s $D/admin.key ] && SPACE_API_KEY=$(cat $D/admin.key) $B/space nodes list >/dev/null 2>&1 && break; sleep 0.5; done
	export SPACE_API_KEY=$(cat $D/admin.key)
}
stop_server() { kill -TERM $spid; wait $spid; rm -rf $D; }
full() { for i in $(seq 1 300); do [ "$($B/space nodes list -o json | grep -o '"ready": *[0-9]*' | head -1 | grep -o '[0-9]*$')" = "$1" ] && { sleep 5; return 0; }; sleep 1; done; return 1; }
echo "== pool miss, exec, files, sustained (no pool), with baselines"
run_server nopool
$B/space bench create --runtime ns --count 20 --baselines
$B/space bench exec --runtime ns --count 200
$B/space bench files --runtime ns --count 10
$B/space bench sustained --runtime ns --clients 8 --duration 30s
stop_server
echo "== pool hit, serial (pool 40)"
run_server pool --warm-pool minimal:ns:1x256=40
full 40 && $B/space bench create --runtime ns --memory 256 --cpus 1 --count 30
stop_server
echo "== burst of 50 (pool 50)"
run_server burst --warm-pool minimal:ns:1x256=50
full 50 && $B/space bench create --runtime ns --memory 256 --cpus 1 --count 50 --concurrency 50
stop_server
