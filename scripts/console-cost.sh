#!/bin/bash
# The web console's cost on the server (docs/console.md): server CPU per poll
# request (GET /v1/sandboxes with 10 sandboxes, GET /v1/sandboxes/{id} and a
# sandbox page's side reads: its snapshots, events and ports), from
# the server process's utime+stime over N requests, one at a time as the
# console sends them. Usage: scripts/console-cost.sh BIN_DIR (make build BIN=…)
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
for i in $(seq 10); do ids+=($(curl -sf -H "$H" -X POST -d '{"template":"minimal","runtime":"ns","memory_mib":256}' http://127.0.0.1:18124/v1/sandboxes | sed 's/.*"id":"\([^"]*\)".*/\1/')); done
cpu() { awk '{print $14+$15}' /proc/$pid/stat; }
N=${N:-2000}
for round in 1 2 3; do
 for path in /v1/sandboxes /v1/sandboxes/${ids[0]} /v1/sandboxes/${ids[0]}/snapshots /v1/sandboxes/${ids[0]}/events /v1/sandboxes/${ids[0]}/ports; do
  a=$(cpu); t0=$(date +%s.%N)
  for i in $(seq $N); do echo "url = \"http://127.0.0.1:18124$path\""; done > $d/urls
  curl -sf -H "$H" -K $d/urls > /dev/null
  b=$(cpu); t1=$(date +%s.%N)
  echo "round $round $path: $N requests, server CPU $(( (b-a)*10 )) ms => $(echo "scale=3; ($b-$a)*10/$N" | bc) ms/request; wall $(echo "$t1-$t0" | bc) s"
 done
done
