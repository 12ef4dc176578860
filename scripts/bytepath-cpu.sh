#!/bin/bash
# bytepath-cpu.sh BINDIR LABEL PORT [ROUNDS]: the CPU per operation of each
# process on the byte path (docs/PERFORMANCE.md, "files and exec bytes, hop
# by hop, 2026-12-06"): server (control plane + node-api), host bridge and
# guest daemon, for ROUNDS (default 8) writes and reads of a 100 MiB file and
# 10×ROUNDS execs of `true`, through the REST API with curl. Runs `BINDIR/space
# server --dev` on a fresh data dir, one ns sandbox, reads /proc/PID/stat of
# the three processes before and after each batch; deletes the sandbox and
# stops the server at the end. Compare builds by interleaving runs:
#   for r in 1 2; do for v in old new; do scripts/bytepath-cpu.sh /tmp/bp-$v $v 7491; done; done
set -u
B=$1; v=$2; port=$3; N=${4:-8}
D=$(mktemp -d /tmp/bytepath-cpu-$v.XXXXXX)
$B/space server --dev --data-dir $D --listen 127.0.0.1:$port --no-base-template --default-runtime ns > $D/server.log 2>&1 &
spid=$!
trap 'kill -TERM $spid 2>/dev/null; wait $spid 2>/dev/null; rm -rf $D' EXIT
export SPACE_API_URL=http://127.0.0.1:$port
# Ready once the minimal template (built at start) is listed.
for i in $(seq 1 600); do [ -s $D/admin.key ] && SPACE_API_KEY=$(cat $D/admin.key) $B/space template list 2>/dev/null | grep -q minimal && break; sleep 0.5; done
export SPACE_API_KEY=$(cat $D/admin.key)
sb=$($B/space sandbox create --runtime ns --template minimal) || exit 1
bridge=$(pgrep -P $spid -f "space-host-bridge --exec-id $sb" | head -1)
nm=$(pgrep -P $spid -f space-node-manager | head -1)
guest=$(pgrep -P $nm space-guest | tail -1)
head -c 100M /dev/urandom > $D/file
url=$SPACE_API_URL/v1/sandboxes/$sb
auth="Authorization: Bearer $SPACE_API_KEY"
cpu() { for p in $spid $bridge $guest; do s=($(sed 's/.*) //' /proc/$p/stat)); echo -n "$((${s[11]}+${s[12]})) "; done; }
hz=$(getconf CLK_TCK)
measure() { # NAME COUNT COMMAND...
	local name=$1 n=$2; shift 2
	local a=($(cpu)) t0=$(date +%s%N)
	for i in $(seq 1 $n); do "$@" || { echo "$name failed" >&2; exit 1; }; done
	local t1=$(date +%s%N) b=($(cpu))
	printf '%s %s: wall %.1f ms/op; CPU ms/op server %.1f, bridge %.1f, guest %.1f\n' "$v" "$name" \
		"$(echo "($t1-$t0)/1000000/$n" | bc -l)" \
		"$(echo "(${b[0]}-${a[0]})*1000/$hz/$n" | bc -l)" "$(echo "(${b[1]}-${a[1]})*1000/$hz/$n" | bc -l)" "$(echo "(${b[2]}-${a[2]})*1000/$hz/$n" | bc -l)"
}
put() { curl -sf -o /dev/null -H "$auth" -H 'Expect:' -T $D/file "$url/files?path=/tmp/bytepath"; }
get() { curl -sf -o /dev/null -H "$auth" "$url/files?path=/tmp/bytepath"; }
run() { curl -sf -o /dev/null -H "$auth" -H 'Content-Type: application/json' -d '{"cmd":["true"]}' "$url/exec"; }
put # the file exists: every timed write replaces it
measure write_100mib $N put
measure read_100mib $N get
measure exec_true $((N * 10)) run
$B/space sandbox delete $sb
