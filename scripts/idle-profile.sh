#!/bin/bash
# idle-profile.sh BINDIR POP PORT OUT: a 20 s Go CPU profile (OUT, pprof) of
# `BINDIR/space server --dev` (server and in-process node) with POP idle ns
# sandboxes (minimal, 128 MiB), on a fresh data dir that is removed after;
# the companion of idle-cpu.sh (docs/PERFORMANCE.md). Read it with
#   go tool pprof -top -cum BINDIR/space OUT
set -u
B=$1; POP=$2; port=$3; out=$4
D=$(mktemp -d /tmp/idle-profile.XXXXXX)
$B/space server --dev --data-dir $D --listen 127.0.0.1:$port --no-base-template --default-runtime ns > $D/server.log 2>&1 &
spid=$!
export SPACE_API_URL=http://127.0.0.1:$port
for i in $(seq 1 600); do [ -s $D/admin.key ] && SPACE_API_KEY=$(cat $D/admin.key) $B/space sandbox list >/dev/null 2>&1 && break; sleep 0.5; done
export SPACE_API_KEY=$(cat $D/admin.key)
ids=()
for i in $(seq 1 $POP); do ids+=($($B/space sandbox create --runtime ns --memory 128 --template minimal 2>>$D/create.err)); done
sleep 5
curl -s -H "Authorization: Bearer $SPACE_API_KEY" -o $out "http://127.0.0.1:$port/debug/pprof/profile?seconds=20"
for id in "${ids[@]}"; do $B/space sandbox delete $id >/dev/null 2>>$D/create.err; done
kill -TERM $spid; wait $spid
rm -rf "$D"
