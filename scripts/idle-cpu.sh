#!/bin/bash
# idle-cpu.sh BINDIR LABEL POP PORT: the CPU per second that POP idle ns
# sandboxes (minimal, 128 MiB) cost, by process kind (docs/PERFORMANCE.md,
# "what an idle ns sandbox costs per second"). Runs `BINDIR/space server
# --dev` on a fresh data dir, creates the sandboxes, waits 5 s, then reads
# /proc/PID/stat of the server's process tree (server with its node,
# node-manager, host bridges, guest daemons) over 20 s. Other processes on
# the machine are not counted. Compare builds by interleaving runs:
#   for r in 1 2; do for v in old new; do scripts/idle-cpu.sh /tmp/bin-$v $v 30 18097; done; done
set -u
B=$1; v=$2; POP=$3; port=$4
D=$(mktemp -d /tmp/idle-cpu-$v.XXXXXX)
$B/space server --dev --data-dir $D --listen 127.0.0.1:$port --no-base-template --default-runtime ns > $D/server.log 2>&1 &
spid=$!
export SPACE_API_URL=http://127.0.0.1:$port
for i in $(seq 1 600); do [ -s $D/admin.key ] && SPACE_API_KEY=$(cat $D/admin.key) $B/space sandbox list >/dev/null 2>&1 && break; sleep 0.5; done
export SPACE_API_KEY=$(cat $D/admin.key)
ids=()
for i in $(seq 1 $POP); do ids+=($($B/space sandbox create --runtime ns --memory 128 --template minimal 2>>$D/create.err)); done
sleep 5
tree() { # the server's descendants, itself included
	local all=($spid) i=0
	while [ $i -lt ${#all[@]} ]; do
		all+=($(cat /proc/${all[$i]}/task/*/children 2>/dev/null)); i=$((i+1))
	done
	echo "${all[@]}"
}
snap() { for p in $(tree); do s=($(sed 's/.*) //' /proc/$p/stat 2>/dev/null)) || continue; [ ${#s[@]} -gt 12 ] && echo "$p $(cat /proc/$p/comm) $((${s[11]}+${s[12]}))"; done | sort; }
snap > $D/s0; sleep 20; snap > $D/s1
tick=$(getconf CLK_TCK)
join $D/s0 $D/s1 | awk -v v=$v -v n=${#ids[@]} -v tick=$tick '{k=$2; if (k ~ /^space-host/) k="bridges"; else if (k ~ /guest/) k="guests"; else if (k ~ /node-mana/) k="node-manager"; else if (k=="space") k="server+node"; else k="other"; by[k]+=$5-$3} END {t=0; line=v" sandboxes="n; for (k in by) {ms=by[k]*1000/tick/20; t+=ms; line=line" "k"="sprintf("%.1f",ms)} printf "%s total=%.1f ms/s per_sandbox=%.2f ms/s\n", line, t, (n>0? t/n : 0)}'
for id in "${ids[@]}"; do $B/space sandbox delete $id >/dev/null 2>>$D/create.err; done
kill -TERM $spid; wait $spid
rm -rf "$D"
