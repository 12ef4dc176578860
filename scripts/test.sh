#!/usr/bin/env bash
# `make test`: every test, with the vm runtime's minimal guest kernel built
# beside them when the cache has none. The build (minutes) runs at low
# priority from the start; the tests that need the kernel (microvm) wait for
# it (vmimage.AwaitMinimalKernel) while the rest run, and a failed build
# fails the run. The longest suites run beside everything else (long,
# below). The concurrency-heavy packages (race, below) run under the
# race detector instead of plainly, after the rest; the nested modules (api,
# sdk/go: `./...` at the root does not enter them) are tested from their own
# roots after the root's.
# Usage: test.sh CACHE_DIR S3_SERVER [MODULE_DIR...]
set -uo pipefail
cache=$1 s3=$2
shift 2
mkdir -p "$cache" bin
log=$cache/kernel-build.log
locked=$(mktemp -u /tmp/space-kernel-locked.XXXXXX)
go build -o bin/buildkernel ./internal/vmimage/buildkernel || exit 1
bin/buildkernel -cache-dir "$cache" -nice 10 -locked-file "$locked" >"$log.out" 2>"$log" &
bk=$!
trap 'kill $bk 2>/dev/null; rm -f "$locked"' EXIT
# The tests start once the build holds the cache's lock (or found the
# kernel): from then on a test that needs it waits for it, never skips.
while [ ! -e "$locked" ] && kill -0 $bk 2>/dev/null; do sleep 0.2; done
# While it builds, the packages whose tests wait for it hold a slot of
# `go test` doing nothing: one more slot keeps the rest going.
par=()
if kill -0 $bk 2>/dev/null; then
  echo "test: building the minimal guest kernel in the background (log: $log)"
  par=(-p $(( $(nproc) + 1 )))
fi
# The packages whose tests run the most goroutines against each other run
# under the race detector, and only so (the same tests; a second plain run
# would only cost time): the reconciler, the node and its client, the node-
# manager, the bridge, the gateway and ingress, the store, the route cache,
# keyed locks, the store's read cache, the service layer, the REST, E2B and MCP front ends, the
# guest daemon and its host-side client, the CLI, the credential store, the
# object stores, image builds. Left plain, for time (docs/PERFORMANCE.md,
# "the race detector in make test"): internal/server (7.5 min under -race
# on a 2-core machine), the drivers (vm boots QEMU under TCG), the btrfs
# volume store, templates, the SQL backends, the e2e and compat suites.
race=(./internal/reconcile/... ./internal/node/... ./internal/nodeclient/... ./internal/nodemanager/...
  ./internal/bridge/... ./internal/gateway/... ./internal/ingress/... ./internal/store/sqlstore/...
  ./internal/store/readcache/... ./internal/route/... ./internal/keylock/... ./internal/service/... ./internal/connecterr/...
  ./internal/restapi/... ./internal/e2bapi/... ./internal/mcpserver/... ./internal/guestd/...
  ./internal/guest/... ./internal/cli/... ./internal/credentials/... ./internal/objstore/...
  ./internal/imagebuild/... ./internal/pinnedproc/... ./internal/privop/... ./internal/unixsock/...
  ./internal/kms/... ./internal/progress/... ./internal/metrics/... ./internal/loglimit/...)
racepkgs=$(go list "${race[@]}") || exit 1
plain=$(go list ./... | grep -vxF -e "$racepkgs") || exit 1
# The timeout has room for a package that waits for the kernel build
# (minutes) before its own tests.
export SPACE_TEST_CACHE_DIR=$cache SPACE_TEST_S3_SERVER=$s3
# The suites that take longest (e2e, compat, the Python SDK's: real
# servers, SDKs, browsers and VMs; e2e alone about 15-23 min) run in a go
# test of their own from the start, two packages at a time; the rest, then
# the race phase and the nested modules, run beside them instead of after
# them (the race phase alone took 3-5 min once e2e had ended). Their output
# goes to a file printed when they end, so the two runs' lines never
# interleave (a package's output is printed whole when it ends anyway).
long=$(grep -xE '.*/(e2e|compat/.*|sdk/python)' <<<"$plain")
short=$(grep -vxF -e "$long" <<<"$plain")
longout=$(mktemp /tmp/space-test-long.XXXXXX)
# shellcheck disable=SC2086 # one package a word
go test -count=1 -timeout 40m -p 2 $long >"$longout" 2>&1 &
lt=$!
trap 'kill $bk $lt 2>/dev/null; rm -f "$locked" "$longout"' EXIT
# shellcheck disable=SC2086
go test -count=1 -timeout 40m "${par[@]}" $short
rc=$?
# shellcheck disable=SC2086
go test -race -count=1 -timeout 20m $racepkgs || rc=1
for m in "$@"; do
  go test -C "$m" -count=1 ./... || rc=1
done
echo "test: waiting for the long suites ($(tr '\n' ' ' <<<"$long"))"
wait $lt || rc=1
cat "$longout"
wait $bk
krc=$?
trap - EXIT
rm -f "$locked" "$longout"
if [ $krc -ne 0 ]; then
  echo "test: the minimal guest kernel build failed (exit $krc); the end of $log:" >&2
  tail -n 30 "$log" >&2
  exit 1
fi
grep -h "minimal guest kernel built" "$log" || true
exit $rc
