#!/bin/bash
# cpu-per-sandbox.sh BINDIR LABEL N PORT [POP]: the machine's CPU per ns sandbox,
# create + delete, pool miss (docs/PERFORMANCE.md, "The create path's CPU
# before and after"). Runs `BINDIR/space server --dev` on a fresh data dir
# in a cpuacct group of its own (server, node, node-manager, bridges), takes
# `space bench create --runtime ns --memory 128 --count N` after 5 untimed
# creates, and prints the CPU of that group and of the `space` cpuacct parent
# (every sandbox's group) over the bench, until the last sandbox's group is
# gone, with the same groups' idle CPU over 15 s before it. Needs root and
# cgroup v1 cpuacct. Compare two builds by interleaving runs:
#   for r in 1 2 3; do for v in old new; do scripts/cpu-per-sandbox.sh /tmp/$v $v 40 18091; done; done
# per sandbox = (host_ms + space_ms - idle rate × wall_s) / N.
# POP (default 0) idle ns sandboxes are created before the idle measurement
# and live through the bench (work per create or delete that grows with the
# sandboxes on the node shows there), then deleted.
set -u
B=$1; v=$2; N=$3; port=$4; POP=${5:-0}
D=$(mktemp -d /tmp/cpu-per-sandbox-$v.XXXXXX); G=/sys/fs/cgroup/cpuacct/cpu-per-sandbox-$$
SP=/sys/fs/cgroup/cpuacct/space
mkdir -p $G
( echo $BASHPID > $G/tasks; exec $B/space server --dev --data-dir $D --listen 127.0.0.1:$port --no-base-template --default-runtime ns > $D/server.log 2>&1 ) &
spid=$!
export SPACE_API_URL=http://127.0.0.1:$port
for i in $(seq 1 600); do [ -s $D/admin.key ] && $B/space sandbox list >/dev/null 2>&1 && break; export SPACE_API_KEY=$(cat $D/admin.key 2>/dev/null); sleep 0.5; done
export SPACE_API_KEY=$(cat $D/admin.key)
# warm: template build and first creates
$B/space bench create --runtime ns --memory 128 --count 5 > /dev/null 2>$D/warm.err || { echo "warm failed"; cat $D/warm.err; }
pop=()
for i in $(seq 1 $POP); do pop+=($($B/space sandbox create --runtime ns --memory 128 --template minimal 2>>$D/pop.err)); done
sleep 3
u() { cat $1/cpuacct.usage; }
# idle
h0=$(u $G); s0=$(u $SP); t0=$(date +%s.%N); sleep 15; h1=$(u $G); s1=$(u $SP); t1=$(date +%s.%N)
# bench, sampling groups under space
( while true; do ls $SP | grep -v '^cgroup\|^cpuacct\|^notify\|^tasks'; sleep 0.2; done ) > $D/groups.txt 2>/dev/null &
lp=$!
h2=$(u $G); s2=$(u $SP); t2=$(date +%s.%N)
$B/space bench create --runtime ns --memory 128 --count $N -o json > $D/bench.json 2>$D/bench.err
kill $lp
sort -u $D/groups.txt > $D/groups.u
# settle: the deletes' cleanup finishes after the bench returns
grep -o "exec=[a-z0-9-]*" $D/server.log | sed 's/exec=//' | sort -u > $D/mine0.u
for i in $(seq 1 150); do left=0; for g in $(comm -12 $D/groups.u $D/mine0.u); do [ -d $SP/$g ] && left=1; done; [ $left = 0 ] && break; sleep 0.2; done
sleep 1
h3=$(u $G); s3=$(u $SP); t3=$(date +%s.%N)
grep -o "exec=[a-z0-9-]*" $D/server.log | sed 's/exec=//' | sort -u > $D/mine.u
foreign=$(comm -23 $D/groups.u $D/mine.u | wc -l)
for id in "${pop[@]}"; do $B/space sandbox delete $id >/dev/null 2>>$D/pop.err; done
kill -INT $spid; wait $spid
echo "$v idle_s=$(echo "$t1-$t0"|bc) idle_host_ms=$(( (h1-h0)/1000000 )) idle_space_ms=$(( (s1-s0)/1000000 )) wall_s=$(echo "$t3-$t2"|bc) host_ms=$(( (h3-h2)/1000000 )) space_ms=$(( (s3-s2)/1000000 )) pop=${#pop[@]} groups=$(wc -l < $D/groups.u) foreign=$foreign p50=$(python3 -c "import json;print(json.load(open('$D/bench.json'))['scenarios']['create']['p50_ms'])" 2>/dev/null)"
rmdir $G 2>/dev/null
rm -rf "$D"
