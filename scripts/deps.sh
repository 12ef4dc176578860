#!/usr/bin/env bash
# Installs the Debian packages SPACE needs that are missing. Usage: deps.sh test|run
# Runs apt-get only as root and only when something is missing.
set -euo pipefail
want=(busybox-static btrfs-progs debootstrap e2fsprogs util-linux iproute2 ca-certificates
      qemu-system-x86 cpio)
# The vm runtime's minimal guest kernel is compiled from Debian's linux-source
# package (internal/vmimage, BuildMinimalKernel): make and gcc, bc, flex and
# bison for Kconfig, libelf for objtool, xz for the source tarball.
want+=(build-essential bc flex bison libelf-dev xz-utils)
# The minimal template ships a static bash (the E2B SDKs run commands with
# /bin/bash -l -c), and the E2B compatibility tests (compat/e2b) run the e2b
# npm SDK with Node.js and npm. Node.js comes from Debian only where none is
# installed (a NodeSource nodejs already brings npm).
want+=(bash-static)
if ! command -v npm >/dev/null 2>&1; then want+=(nodejs npm); fi
# The Python SDK's tests (sdk/python), the MCP test (e2e TestMCP) and the
# E2B Python SDK tests (compat/e2b) make venvs and pip-install pinned PyPI
# packages into them, where no python3 with venv is installed.
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then want+=(python3 python3-venv python3-pip); fi
if [ "${1:-test}" = run ]; then
  want+=(qemu-utils)
fi
# The PostgreSQL store's tests run private servers from the package's binaries
# (internal/store/postgres/pgtest: initdb and postgres under
# /usr/lib/postgresql/*/bin, as the `postgres` user it creates). A cluster the
# package may start on port 5432 is not used and does not get in the way.
if [ "${1:-test}" = test ]; then
  want+=(postgresql)
  # The web console's end-to-end test (e2e TestConsole) drives Debian's
  # Chromium and Firefox ESR headless through playwright-core (Firefox over
  # WebDriver BiDi): no browser download.
  want+=(chromium firefox-esr)
fi
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# The vm runtime fetches the guest kernel with `apt-get download`, which needs
# package lists even when nothing is missing.
lists_present() { ls /var/lib/apt/lists/*Packages* >/dev/null 2>&1; }
if [ ${#missing[@]} -eq 0 ]; then
  if ! lists_present && [ "$(id -u)" = 0 ]; then apt-get update -qq || true; fi
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "SPACE needs these Debian packages: ${missing[*]}" >&2
  echo "install them as root: apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq || true
apt-get install -y -qq --no-install-recommends "${missing[@]}"
