#!/bin/bash
# density.sh BINDIR N PORT [OVERCOMMIT]: N idle ns sandboxes on one dev server
# (docs/PERFORMANCE.md, "density"; issue 20 item 3). Runs `BINDIR/space
# server --dev` on a fresh data dir with --memory-overcommit OVERCOMMIT
# (default: the least whole ratio under which N+1 sandboxes of 64 MiB fit in
# the node's memory, which a --dev node counts as 3/4 of MemTotal: 1,000 x 64
# MiB on this 24 GiB machine, 18,078 MiB of node memory, need 3.55, so 4) and
# --cpu-overcommit big enough for N+1 one-CPU sandboxes on this machine's
# cores. Then:
#  - a neighbour's exec p99 of `true` (`space bench exec --count 100`) with
#    no sandbox alive;
#  - N creates (ns, minimal, 64 MiB, no timeout), one at a time: refusals
#    (with the first errors) and create latency p50/p90/p99/max;
#  - MemAvailable before and after the N (per sandbox, after 10 s of settling);
#  - the CPU per second with the N alive over 30 s: the server's process tree
#    (server, node, node-manager, bridges, guests; /proc/PID/stat) and the
#    whole machine (/proc/stat: other work on the machine shows there too);
#  - the neighbour's exec p99 again with the N alive, and the ratio;
#  - deletes all, stops the server and counts what is left of its making:
#    processes (the server's tree, anything naming the data dir), mounts and
#    loop devices under the data dir, cgroups and netns named after one of
#    its executions.
# Needs root. Example: scripts/density.sh /tmp/bin 200 18099
set -u
B=$1; N=$2; port=$3
node_mib=$(awk '/^MemTotal:/ {print int(int($2/1024)*3/4)}' /proc/meminfo)
OC=${4:-$(( ((N+1)*64 + node_mib - 1) / node_mib ))}
[ $OC -lt 1 ] && OC=1
echo "node memory $node_mib MiB, --memory-overcommit $OC (allows $((OC*node_mib)) MiB, $(( (N+1)*64 )) needed)"
D=$(mktemp -d /tmp/density.XXXXXX)
ncpu=$(nproc)
cpuoc=$(( (N + 64) / ncpu + 64 ))
mem() { awk '/^MemAvailable:/ {print int($2/1024)}' /proc/meminfo; }
tree() { # the server's descendants, itself included
	local all=($spid) i=0
	while [ $i -lt ${#all[@]} ]; do
		all+=($(cat /proc/${all[$i]}/task/*/children 2>/dev/null)); i=$((i+1))
	done
	echo "${all[@]}"
}
treecpu() { for p in $(tree); do s=($(sed 's/.*) //' /proc/$p/stat 2>/dev/null)) || continue; [ ${#s[@]} -gt 12 ] && echo $((${s[11]}+${s[12]})); done | awk '{t+=$1} END {print t+0}'; }
$B/space server --dev --data-dir $D/data --listen 127.0.0.1:$port --no-base-template --default-runtime ns \
	--memory-overcommit $OC --cpu-overcommit $cpuoc > $D/server.log 2>&1 &
spid=$!
export SPACE_API_URL=http://127.0.0.1:$port
for i in $(seq 1 600); do [ -s $D/data/admin.key ] && SPACE_API_KEY=$(cat $D/data/admin.key) $B/space sandbox list >/dev/null 2>&1 && break; sleep 0.5; done
export SPACE_API_KEY=$(cat $D/data/admin.key)
p99() { python3 -c "import json,sys; s=json.load(open(sys.argv[1]))['scenarios']['exec']; print(s['p50_ms'], s['p99_ms'])" $1 2>/dev/null || echo "? ?"; }
$B/space bench exec --runtime ns --memory 64 --count 100 -o json > $D/exec0.json 2>$D/exec0.err || cat $D/exec0.err
read e50_0 e99_0 < <(p99 $D/exec0.json)
echo "exec idle: p50=${e50_0} p99=${e99_0} ms"
sleep 5
ma0=$(mem)
ids=(); refused=0; : > $D/lat
t0=$(date +%s)
for i in $(seq 1 $N); do
	s=$(date +%s%N)
	if id=$($B/space sandbox create --runtime ns --memory 64 --template minimal 2>>$D/create.err); then
		ids+=($id); echo $(( ($(date +%s%N) - s) / 1000000 )) >> $D/lat
	else
		refused=$((refused+1))
	fi
	[ $((i % 100)) = 0 ] && echo "created $i: alive=${#ids[@]} refused=$refused MemAvailable=$(mem) MiB ($(( $(date +%s) - t0 )) s)"
done
echo "refused=$refused"; [ $refused -gt 0 ] && sort $D/create.err | uniq -c | sort -rn | head -3
lat() { sort -n $D/lat | awk '{a[NR]=$1} END {if (NR==0) {print "none"; exit}; printf "p50=%d p90=%d p99=%d max=%d ms (n=%d)\n", a[int(NR*0.5+0.5)], a[int(NR*0.9+0.5)], a[int(NR*0.99+0.5)], a[NR], NR}'; }
echo "create latency: $(lat)"
awk '{print int((NR-1)/100)*100+1"-"int((NR-1)/100)*100+100, $1}' $D/lat | sort -t' ' -k1,1 -s | awk '{k=$1; v[k]=v[k]" "$2} END {for (k in v) print k, v[k]}' | sort -n | while read k rest; do
	echo "  creates $k: $(echo $rest | tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END {printf "p50=%d p90=%d", a[int(NR*0.5+0.5)], a[int(NR*0.9+0.5)]}') ms"
done
sleep 10
ma1=$(mem)
echo "MemAvailable: before=$ma0 after=$ma1 MiB, per sandbox=$(echo "scale=2; ($ma0-$ma1)/${#ids[@]}" | bc) MiB"
stat() { awk '/^cpu / {print $2+$3+$4+$6+$7+$8, $5}' /proc/stat; }
ntree=$(tree | wc -w)
read b0 i0 < <(stat); c0=$(treecpu); ts0=$(date +%s.%N); sleep 30; read b1 i1 < <(stat); c1=$(treecpu); ts1=$(date +%s.%N)
tick=$(getconf CLK_TCK)
busy=$(echo "scale=1; ($b1-$b0)*1000/$tick/($ts1-$ts0)" | bc)
own=$(echo "scale=1; ($c1-$c0)*1000/$tick/($ts1-$ts0)" | bc)
echo "CPU with ${#ids[@]} alive over 30 s: server tree ($ntree processes) $own ms/s, per sandbox $(echo "scale=3; $own/${#ids[@]}" | bc) ms/s; whole machine $busy ms/s of $((ncpu*1000)), per sandbox $(echo "scale=3; $busy/${#ids[@]}" | bc) ms/s"
$B/space bench exec --runtime ns --memory 64 --count 100 -o json > $D/exec1.json 2>$D/exec1.err || cat $D/exec1.err
read e50_1 e99_1 < <(p99 $D/exec1.json)
echo "exec with ${#ids[@]} alive: p50=${e50_1} p99=${e99_1} ms; p99 ratio $(echo "scale=2; $e99_1/$e99_0" | bc 2>/dev/null)"
del=0
for id in "${ids[@]}"; do $B/space sandbox delete $id >/dev/null 2>>$D/delete.err || del=$((del+1)); done
echo "delete failures=$del"
sleep 5
kill -INT $spid; wait $spid
sleep 2
grep -o "exec=[a-z0-9-]*" $D/server.log | sed 's/exec=//' | sort -u > $D/execs
cg=$(find /sys/fs/cgroup -type d 2>/dev/null | awk -F/ '{print $NF}' | sort -u | comm -12 - $D/execs | wc -l)
ns=$(ls /var/run/netns 2>/dev/null | sort -u | comm -12 - $D/execs | wc -l)
pr=$(( $(tree | wc -w) - 1 + $(ps -eo args | grep -v grep | grep -c "$D") ))
mn=$(grep -c " $D" /proc/self/mountinfo)
lo=$(losetup -a 2>/dev/null | grep -c "$D")
echo "left after stop ($(wc -l < $D/execs) executions made): processes=$pr mounts=$mn loops=$lo cgroups=$cg netns=$ns"
grep -c . $D/create.err 2>/dev/null | sed 's/^/create stderr lines: /'
[ "${KEEP:-}" ] && echo "kept $D" || rm -rf "$D"
