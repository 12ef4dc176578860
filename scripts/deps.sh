#!/usr/bin/env bash
# Installs the Debian packages SPACE needs that are missing. Usage: deps.sh test|run
# Runs apt-get only as root and only when something is missing.
set -euo pipefail
want=(busybox-static btrfs-progs debootstrap e2fsprogs util-linux iproute2 ca-certificates)
if [ "${1:-test}" = run ]; then
  want+=(qemu-system-x86 qemu-utils)
fi
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "SPACE needs these Debian packages: ${missing[*]}" >&2
  echo "install them as root: apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq || true
apt-get install -y -qq --no-install-recommends "${missing[@]}"
