#!/bin/sh
# dfcache-times.sh OLD_SPACE NEW_BIN_DIR [ROUNDS]: wall times of a Dockerfile
# build, a rebuild with nothing changed and a rebuild after one COPY'd file
# changed, with the CLI of the base commit (OLD_SPACE: no step cache) and
# the new one, interleaved round by round, against one `space server --dev`
# from NEW_BIN_DIR (root, ns). The Dockerfile's RUNs do a few seconds of
# shell work before and after the COPY, as a real install step would.
set -eu
old=$1 newdir=$2 rounds=${3:-3}
new=$newdir/space
work=$(mktemp -d)
data=$work/data ctx=$work/ctx
mkdir -p "$ctx"
"$new" server --dev --listen 127.0.0.1:0 --data-dir "$data" --kernel-build wait --no-base-template --default-runtime ns >"$work/out" 2>"$work/err" &
srv=$!
trap 'kill $srv 2>/dev/null; wait $srv 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 300); do grep -q '^SPACE_API_URL=' "$work/out" 2>/dev/null && break; sleep 0.2; done
SPACE_API_URL=$(sed -n 's/^SPACE_API_URL=//p' "$work/out")
SPACE_API_KEY=$(cat "$data/admin.key")
export SPACE_API_URL SPACE_API_KEY
until "$new" template list 2>/dev/null | grep -q '^minimal.*ready'; do sleep 0.5; done
cat >"$ctx/Dockerfile" <<'DF'
FROM minimal
RUN i=0; while [ $i -lt 2000000 ]; do i=$((i+1)); done; echo $i > /deps
WORKDIR /app
COPY app.txt ./
RUN i=0; while [ $i -lt 500000 ]; do i=$((i+1)); done; cat app.txt > /app/built
DF
secs() { s=$(date +%s.%N); "$@" >/dev/null 2>&1 || { echo "failed: $*" >&2; exit 1; }; e=$(date +%s.%N); echo "$e - $s" | bc; }
build() { "$1" template delete dfbench >/dev/null 2>&1 || true; secs "$1" template build dfbench --dockerfile "$ctx/Dockerfile" --context "$ctx"; }
printf '%-5s %-4s %8s %8s %8s\n' round cli build same onechg
for r in $(seq "$rounds"); do
	for cli in old new; do
		bin=$old; [ $cli = new ] && bin=$new
		"$new" template cache prune >/dev/null 2>&1
		echo "round $r" >"$ctx/app.txt"
		b=$(build "$bin"); s=$(build "$bin")
		echo "round $r changed" >"$ctx/app.txt"
		c=$(build "$bin")
		printf '%-5s %-4s %8.2f %8.2f %8.2f\n' "$r" $cli "$b" "$s" "$c"
	done
done
