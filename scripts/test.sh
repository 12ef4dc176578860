#!/usr/bin/env bash
# `make test`: every test, with the vm runtime's minimal guest kernel built
# beside them when the cache has none. The build (minutes) runs at low
# priority from the start; the tests that need the kernel (microvm) wait for
# it (vmimage.AwaitMinimalKernel) while the rest run, and a failed build
# fails the run. The nested modules (api, sdk/go: `./...` at the root does
# not enter them) are tested from their own roots after the root's, and the
# concurrency-heavy packages once more under -race.
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
# The timeout has room for a package that waits for the kernel build
# (minutes) before its own tests.
SPACE_TEST_CACHE_DIR=$cache SPACE_TEST_S3_SERVER=$s3 go test -count=1 -timeout 40m "${par[@]}" ./...
rc=$?
# The packages whose tests run the most goroutines against each other (the
# reconciler, the node and its client, the bridge, the gateway, the store,
# the route cache, keyed locks, the service layer) a second time under the
# race detector. (internal/server is left out: under -race its tests take
# longer than the whole suite's budget allows on a 2-core machine.)
race=(./internal/reconcile/... ./internal/node/... ./internal/nodeclient/... ./internal/bridge/...
  ./internal/gateway/... ./internal/store/sqlstore/... ./internal/route/... ./internal/keylock/...
  ./internal/service/... ./internal/connecterr/...)
go test -race -count=1 -timeout 20m "${race[@]}" || rc=1
for m in "$@"; do
  go test -C "$m" -count=1 ./... || rc=1
done
wait $bk
krc=$?
trap - EXIT
rm -f "$locked"
if [ $krc -ne 0 ]; then
  echo "test: the minimal guest kernel build failed (exit $krc); the end of $log:" >&2
  tail -n 30 "$log" >&2
  exit 1
fi
grep -h "minimal guest kernel built" "$log" || true
exit $rc
