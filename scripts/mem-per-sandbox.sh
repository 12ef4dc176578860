#!/bin/bash
# mem-per-sandbox.sh BINDIR LABEL N PORT [ROUNDS]: what an idle ns sandbox
# (minimal, 128 MiB) costs in memory, and where it goes (docs/PERFORMANCE.md,
# "memory per idle ns sandbox"; issue 20). Runs `BINDIR/space server --dev`
# on a fresh data dir, creates and deletes 2 sandboxes (untimed: the
# template, the guest binary and the server's first allocations), then
# ROUNDS (default 1) times: N creates one at a time, SETTLE (default 10) s
# of settling (130: past the Go runtime's forced GC of an idle process), the
# figures below, N deletes, 5 s. Per sandbox, from the round's
# before/after differences:
#  - MemAvailable's drop (the issue's measure; other work on the machine
#    shows in it: read it with the parts below);
#  - /proc/meminfo's AnonPages, SUnreclaim, SReclaimable, KernelStack,
#    PageTables, Percpu, Shmem;
#  - the PSS (anon and file, /proc/PID/smaps_rollup) of the server's tree by
#    kind: each bridge and guest daemon (their mean), and the server (with
#    its in-process node) and node-manager's growth over the N; the bridge's
#    and guest's page tables (VmPTE) and threads;
#  - the server's live Go heap (HeapAlloc after a forced GC, from
#    /debug/pprof/heap) grown over the N;
#  - this server's sandboxes' memory cgroups (memory.usage_in_bytes and
#    memory.kmem.usage_in_bytes, cgroup v1; memory.current on v2): what the
#    kernel charges to the sandbox itself;
#  - with SLABS=1, the 12 slab caches that grew most (/proc/slabinfo,
#    active objects x object size).
# Compare builds by interleaving rounds of separate runs:
#   for r in 1 2 3; do for v in old new; do scripts/mem-per-sandbox.sh /tmp/bin-$v $v 20 18421; done; done
# Needs root.
set -u
B=$1; v=$2; N=$3; port=$4; ROUNDS=${5:-1}
D=$(mktemp -d /tmp/mem-per-sandbox-$v.XXXXXX)
$B/space server --dev --data-dir $D --listen 127.0.0.1:$port --no-base-template --default-runtime ns > $D/server.log 2>&1 &
spid=$!
export SPACE_API_URL=http://127.0.0.1:$port
for i in $(seq 1 600); do [ -s $D/admin.key ] && SPACE_API_KEY=$(cat $D/admin.key) $B/space sandbox list >/dev/null 2>&1 && break; sleep 0.5; done
export SPACE_API_KEY=$(cat $D/admin.key)
# the minimal template is made after the API answers
for i in $(seq 1 120); do $B/space template list 2>/dev/null | grep -q "^minimal *ready" && break; sleep 0.5; done
create() { $B/space sandbox create --runtime ns --memory 128 --template minimal 2>>$D/create.err; }
tree() { # the server's descendants, itself included
	local all=($spid) i=0
	while [ $i -lt ${#all[@]} ]; do
		all+=($(cat /proc/${all[$i]}/task/*/children 2>/dev/null)); i=$((i+1))
	done
	echo "${all[@]}"
}
# meminfo KEY...: the values in KiB
meminfo() { for k in "$@"; do awk -v k="$k:" '$1 == k {print $2}' /proc/meminfo; done | tr '\n' ' '; }
keys="MemAvailable AnonPages SUnreclaim SReclaimable KernelStack PageTables Percpu Shmem"
# pss: "kind pss_anon pss_file" per process of the tree, KiB
pss() {
	for p in $(tree); do
		c=$(cat /proc/$p/comm 2>/dev/null) || continue
		case $c in space-host-brid) k=bridge;; space-guest) k=guest;; space-node-mana) k=node-manager;; space) k=server;; *) k=other;; esac
		t=$(ls /proc/$p/task 2>/dev/null | wc -l)
		pte=$(awk '/^VmPTE:/ {print $2}' /proc/$p/status 2>/dev/null)
		awk -v k=$k -v t=$t -v pte=${pte:-0} '/^Pss_Anon:/ {a=$2} /^Pss_File:/ {f=$2} END {print k, a+0, f+0, t, pte}' /proc/$p/smaps_rollup 2>/dev/null
	done
}
# liveheap: the server's live Go heap (HeapAlloc after a forced GC), bytes
liveheap() { curl -s -H "Authorization: Bearer $SPACE_API_KEY" "$SPACE_API_URL/debug/pprof/heap?debug=1&gc=1" | awk '/^# HeapAlloc = / {print $4}'; }
slabs() { awk 'NR > 2 {print $1, $2 * $4}' /proc/slabinfo | sort; }
cgmem() { # sum of this server's sandbox groups' usage and kmem, bytes
	for e in $(ls $D/node/execs 2>/dev/null); do
		if [ -d /sys/fs/cgroup/memory/space/$e ]; then
			echo "$(cat /sys/fs/cgroup/memory/space/$e/memory.usage_in_bytes) $(cat /sys/fs/cgroup/memory/space/$e/memory.kmem.usage_in_bytes)"
		elif [ -f /sys/fs/cgroup/space/$e/memory.current ]; then
			echo "$(cat /sys/fs/cgroup/space/$e/memory.current) 0"
		fi
	done | awk '{u+=$1; k+=$2} END {print u+0, k+0}'
}
for id in $(create) $(create); do $B/space sandbox delete $id >/dev/null 2>>$D/create.err; done
sleep 5
for r in $(seq 1 $ROUNDS); do
	sync; sleep 2
	h0=$(liveheap); m0=($(meminfo $keys)); pss > $D/pss0; slabs > $D/slab0
	ids=()
	for i in $(seq 1 $N); do id=$(create) && ids+=($id); done
	n=${#ids[@]}
	sleep ${SETTLE:-10}; sync; sleep 2
	m1=($(meminfo $keys)); pss > $D/pss1; slabs > $D/slab1; read cgu cgk < <(cgmem); h1=$(liveheap)
	line="$v round=$r sandboxes=$n"
	i=0
	for k in $keys; do line="$line $k=$(echo "scale=2; (${m0[$i]}-${m1[$i]})*(-1)^($i>0)/1024/$n" | bc)"; i=$((i+1)); done
	# per-process figures: the mean bridge and guest; the server's and
	# node-manager's growth over the round, per sandbox
	line="$line $(awk -v n=$n 'FNR == NR {a0[$1]+=$2; f0[$1]+=$3; next} {a1[$1]+=$2; f1[$1]+=$3; t1[$1]+=$4; p1[$1]+=$5; c[$1]++}
		END {for (k in c) if (k == "bridge" || k == "guest") printf "%s_pss_anon=%.2f %s_pss_file=%.2f %s_pte=%.2f %s_threads=%.1f ", k, a1[k]/c[k]/1024, k, f1[k]/c[k]/1024, k, p1[k]/c[k]/1024, k, t1[k]/c[k];
			else printf "%s_growth_anon=%.2f %s_growth_file=%.2f ", k, (a1[k]-a0[k])/n/1024, k, (f1[k]-f0[k])/n/1024}' $D/pss0 $D/pss1)"
	line="$line server_live_heap=$(echo "scale=3; ($h1-$h0)/1048576/$n" | bc)"
	line="$line cgroup_usage=$(echo "scale=2; $cgu/1048576/$n" | bc) cgroup_kmem=$(echo "scale=2; $cgk/1048576/$n" | bc)"
	echo "$line (MiB per sandbox)"
	if [ "${SLABS:-}" ]; then
		join -a 2 -e 0 -o 0,1.2,2.2 $D/slab0 $D/slab1 | awk -v n=$n '{d=($3-$2)/n; if (d > 0) printf "  slab %s %.1f KiB\n", $1, d/1024}' | sort -k3 -rn | head -12
	fi
	for id in "${ids[@]}"; do $B/space sandbox delete $id >/dev/null 2>>$D/create.err; done
	sleep 5
done
kill -TERM $spid; wait $spid
grep -c . $D/create.err 2>/dev/null | sed 's/^/create or delete stderr lines: /'
[ "${KEEP:-}" ] && echo "kept $D" || rm -rf "$D"
