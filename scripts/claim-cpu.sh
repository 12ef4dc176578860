#!/bin/bash
# claim-cpu.sh BINDIR LABEL PORT [POOL] [N]: what a warm-pool claim costs
# (docs/PERFORMANCE.md, "the warm-pool claim path"). Runs `BINDIR/space
# server --dev` on a fresh data dir with a warm pool of POOL (default 40)
# minimal ns 1x256 sandboxes, waits until it is full, then
#  1. `space bench create --runtime ns --memory 256 --count N` (default 30):
#     p50/p90 and the machine's CPU per create (the whole machine, other
#     load included);
#  2. after the pool refilled, N serial `space sandbox create` of that shape,
#     with the CPU of the server's process tree (server with its node,
#     node-manager, host bridges, guest daemons) from the schedstat of every
#     thread before and after, by process kind, per create; the CLI's own
#     CPU is not counted, nor any other process on the machine.
# Deletes are outside both windows. Compare builds by interleaving runs:
#   for r in 1 2; do for v in old new; do scripts/claim-cpu.sh /tmp/bin-$v $v 18098; done; done
set -u
B=$1; v=$2; port=$3; POOL=${4:-40}; N=${5:-30}
D=$(mktemp -d /tmp/claim-cpu-$v.XXXXXX)
$B/space server --dev --data-dir $D --listen 127.0.0.1:$port --no-base-template --kernel-build off \
	--warm-pool minimal:ns:1x256=$POOL > $D/server.log 2>&1 &
spid=$!
export SPACE_API_URL=http://127.0.0.1:$port
for i in $(seq 1 600); do [ -s $D/admin.key ] && SPACE_API_KEY=$(cat $D/admin.key) $B/space nodes list >/dev/null 2>&1 && break; sleep 0.5; done
export SPACE_API_KEY=$(cat $D/admin.key)
full() { # wait until the pool holds POOL ready sandboxes, then 5 s more
	for i in $(seq 1 300); do
		[ "$($B/space nodes list -o json | grep -o '"ready": *[0-9]*' | head -1 | grep -o '[0-9]*$')" = "$POOL" ] && { sleep 5; return 0; }
		sleep 1
	done
	echo "$v: the warm pool did not fill" >&2; return 1
}
full || exit 1
$B/space bench create --runtime ns --memory 256 --count $N -o json > $D/bench.json
python3 -c "import json,sys; c=json.load(open(sys.argv[1]))['scenarios']['create']; print('$v bench: p50 %.1f p90 %.1f ms, machine CPU %s ms/create' % (c['p50_ms'], c['p90_ms'], c.get('cpu_ms_per_op')))" $D/bench.json
full || exit 1
tree() { # the server's descendants, itself included
	local all=($spid) i=0
	while [ $i -lt ${#all[@]} ]; do
		all+=($(cat /proc/${all[$i]}/task/*/children 2>/dev/null)); i=$((i+1))
	done
	echo "${all[@]}"
}
snap() { # pid kind start-time cpu-ns (the sum over its threads)
	for p in $(tree); do
		st=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null) || continue
		ns=$(cat /proc/$p/task/*/schedstat 2>/dev/null | awk '{s+=$1} END {print s+0}')
		echo "$p $(cat /proc/$p/comm) $(echo $st | cut -d' ' -f20) $ns"
	done | sort
}
ids=()
snap > $D/s0
t0=$(date +%s%N)
for i in $(seq 1 $N); do ids+=($($B/space sandbox create --runtime ns --memory 256 --template minimal 2>>$D/create.err)); done
t1=$(date +%s%N)
snap > $D/s1
# A process in s1 and not in s0 (or another with a reused pid) counts from 0.
awk -v v=$v -v n=$N -v wall=$(( (t1-t0)/1000000 )) '
	NR==FNR {start[$1]=$3; cpu[$1]=$4; next}
	{k=$2; if (k ~ /^space-host/) k="bridges"; else if (k ~ /guest/) k="guests"; else if (k ~ /node-mana/) k="node-manager"; else if (k=="space") k="server+node"; else k="other"
	 base=($1 in start && start[$1]==$3) ? cpu[$1] : 0; by[k]+=($4-base)/1e6}
	END {t=0; line=v" claims="n; for (k in by) {t+=by[k]; line=line" "k"="sprintf("%.2f",by[k]/n)} printf "%s total=%.2f ms/create (CLI loop %d ms)\n", line, t/n, wall}' $D/s0 $D/s1
[ -s $D/create.err ] && { echo "$v: create errors:" >&2; cat $D/create.err >&2; }
for id in "${ids[@]}"; do $B/space sandbox delete $id >/dev/null 2>&1; done
kill -TERM $spid; wait $spid
rm -rf "$D"
