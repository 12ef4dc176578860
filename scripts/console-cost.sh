#!/bin/bash
# The web console's cost on the server (docs/console.md): server CPU per poll
# request (GET /v1/sandboxes with 10 sandboxes, GET /v1/sandboxes/{id} and a
# sandbox page's side reads: its snapshots, events and ports), from
# the server process's utime+stime over N requests, one at a time as the
# console sends them (the metrics one over the history only: a sample
# taken now waits a quarter second on the node, measured in the schedule
# below); then the server's CPU per second idle and with one
# open console simulated at the console's own schedule (the table, then a
# sandbox's page), interleaved idle/console for ROUNDS rounds of SECS
# seconds, and their ratio. Usage: scripts/console-cost.sh BIN_DIR (make
# build BIN=…); N, ROUNDS and SECS override the counts.
set -e
d=$(mktemp -d /tmp/console-cost.XXXX)
SPACE_CACHE_DIR=/var/cache/space "$1"/space server --dev --listen 127.0.0.1:18124 --data-dir $d --no-base-template > $d/log 2>&1 &
pid=$!
cleanup() {
  for id in "${ids[@]}"; do curl -sf -H "$H" -X DELETE http://127.0.0.1:18124/v1/sandboxes/$id >/dev/null || true; done
  kill $pid; wait $pid 2>/dev/null
  # The dev server's btrfs volume image, if its node left it mounted.
  if mountpoint -q $d/volumes; then umount $d/volumes; fi
  for l in $(losetup -j $d/volumes.img -O NAME -n 2>/dev/null); do losetup -d $l; done
  rm -rf $d
}
ids=()
trap cleanup EXIT
for i in $(seq 100); do curl -sf http://127.0.0.1:18124/readyz >/dev/null && break; sleep 0.2; done
key=$(cat $d/admin.key)
H="Authorization: Bearer $key"
for i in $(seq 100); do curl -sf -H "$H" http://127.0.0.1:18124/v1/templates | grep -q '"minimal".*"ready"\|"ready".*"minimal"' && break; sleep 0.5; done
# Ten sandboxes; a create refused (a shared machine's node under memory
# pressure refuses new ones for a while) is retried for a minute.
for i in $(seq 10); do
  for try in $(seq 60); do
    id=$(curl -s -H "$H" -X POST -d '{"template":"minimal","runtime":"ns","memory_mib":256}' http://127.0.0.1:18124/v1/sandboxes | sed -n 's/.*"id":"\([a-z0-9]*\)".*/\1/p')
    [ -n "$id" ] && break; sleep 1
  done
  [ -n "$id" ] || { echo "create sandbox $i: refused for a minute" >&2; exit 1; }
  ids+=($id)
done
cpu() { awk '{print $14+$15}' /proc/$pid/stat; }
N=${N:-2000}
for round in 1 2 3; do
 for path in /v1/sandboxes /v1/sandboxes/${ids[0]} /v1/sandboxes/${ids[0]}/snapshots /v1/sandboxes/${ids[0]}/events /v1/sandboxes/${ids[0]}/ports "/v1/sandboxes/${ids[0]}/metrics?end=$(( $(date +%s) - 1 ))" /v1/sandboxes/${ids[0]}/egress /v1/nodes /v1/templates; do
  a=$(cpu); t0=$(date +%s.%N)
  for i in $(seq $N); do echo "url = \"http://127.0.0.1:18124$path\""; done > $d/urls
  curl -sf -H "$H" -K $d/urls > /dev/null
  b=$(cpu); t1=$(date +%s.%N)
  echo "round $round $path: $N requests, server CPU $(( (b-a)*10 )) ms => $(echo "scale=3; ($b-$a)*10/$N" | bc) ms/request; wall $(echo "$t1-$t0" | bc) s"
 done
done

# One open console at its schedule (console/src/main.ts): the table reads
# the list every 2 s and, every 6 s, the metrics now of each running
# sandbox shown (10 here); a sandbox's page reads its record every 2 s and,
# every 6 s, its snapshots, processes, metrics (its whole life), ports and
# events. Server CPU per second over SECS seconds, against SECS seconds idle
# just before (the server samples every running sandbox's metrics every
# 5 s either way). Only the curls are waited for: a bare wait would wait
# for the server.
U=http://127.0.0.1:18124
table() { local end=$(( $(date +%s) + SECS )) t=0
  while [ $(date +%s) -lt $end ]; do
    curl -sf -H "$H" $U/v1/sandboxes >/dev/null
    if [ $((t % 3)) = 0 ]; then now=$(date +%s); ps=(); for id in "${ids[@]}"; do curl -sf -H "$H" "$U/v1/sandboxes/$id/metrics?start=$((now-1))" >/dev/null & ps+=($!); done; wait "${ps[@]}"; fi
    t=$((t+1)); sleep 2; done; }
page() { local end=$(( $(date +%s) + SECS )) t=0 id=${ids[0]}
  while [ $(date +%s) -lt $end ]; do
    curl -sf -H "$H" $U/v1/sandboxes/$id >/dev/null
    if [ $((t % 3)) = 0 ]; then ps=(); for r in snapshots processes metrics ports events; do curl -sf -H "$H" $U/v1/sandboxes/$id/$r >/dev/null & ps+=($!); done; wait "${ps[@]}"; fi
    t=$((t+1)); sleep 2; done; }
SECS=${SECS:-30}
for round in $(seq ${ROUNDS:-3}); do
 for what in table page; do
  a=$(cpu); sleep $SECS; b=$(cpu)
  $what; c=$(cpu)
  idle=$(echo "scale=3; ($b-$a)*10/$SECS" | bc); busy=$(echo "scale=3; ($c-$b)*10/$SECS" | bc)
  ratio=n/a; [ "$b" != "$a" ] && ratio=$(echo "scale=2; ($c-$b)/($b-$a)" | bc)
  echo "round $round $what: idle $idle ms CPU/s, with the console $busy ms CPU/s, ratio $ratio"
 done
done
