#!/usr/bin/env bash
# The README's quick start: ./dev.sh demo | ./dev.sh test [pytest args] | ./dev.sh <netco args>
#   ./dev.sh p4 [--src DIR] [--help]: build the P4 toolchain (PI, BMv2, p4c; tools/p4-toolchain.sh)
#
# Creates .venv (once), installs netco with its test extras into it (again whenever
# pyproject.toml, setup.py or any C source or header under host/ changed) and runs the command.
# torch: a torch already in the venv is kept. Otherwise NETCO_TORCH is installed, by default
# torch==2.13.0 (a CPU wheel on the reference machines' local disk; elsewhere pip picks the
# build for your platform). Any torch >= 2.1 works: NETCO_TORCH='torch>=2.1' ./dev.sh demo
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
VENV=${NETCO_VENV:-.venv}
say() { echo "dev.sh: $*" >&2; }
# ./dev.sh p4 [options]: build the P4 toolchain (PI, BMv2, p4c) into a prefix; needs no venv.
[ "${1:-}" = p4 ] && { shift; exec tools/p4-toolchain.sh "$@"; }
# A toolchain built by ./dev.sh p4 is on PATH for every command below (tests find BMv2/p4c by PATH).
p4bin=${NETCO_P4_PREFIX:-/opt/p4tools}/bin
if [ -x "$p4bin/simple_switch_grpc" ] && [[ ":$PATH:" != *":$p4bin:"* ]]; then
  export PATH="$p4bin:$PATH"
fi
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV ($PY -m venv)"
  "$PY" -m venv "$VENV" || { say "'$PY -m venv' failed; on Debian: apt-get install python3-venv"; exit 2; }
  # A venv whose interpreter other users cannot reach (root's pyenv under /root, mode 0700) is
  # its owner's alone: another user's netco cannot start it in a user namespace (the demo then
  # runs on loopback, time emulated).
  why=$("$VENV/bin/python" -m host.tools --others-cannot-run "$VENV/bin/python" 2>/dev/null || true)
  if [ -n "$why" ]; then
    say "warning: other users cannot run $VENV/bin/python ($(readlink -f "$VENV/bin/python")): $why;"
    say "  for a venv everyone can use, build it from an interpreter they can run, e.g." \
        "PYTHON=/usr/bin/python3 NETCO_VENV=/opt/netco-venv ./dev.sh"
  fi
fi
if ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
  say "installing ${NETCO_TORCH:-torch==2.13.0} (needs the package index; a few minutes)"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${NETCO_TORCH:-torch==2.13.0}"
fi
stamp="$VENV/.netco-installed"
# Reinstall (rebuilding the C extensions) when the packaging or any C source or header changed.
changed() {
  find pyproject.toml setup.py host \( -name pyproject.toml -o -name setup.py -o -name '*.c' -o -name '*.h' \) \
    -newer "$stamp" -print -quit 2>/dev/null
}
if [ ! -f "$stamp" ] || [ -n "$(changed)" ]; then
  say "installing netco + test extras into $VENV (pip install -e '.[dev]'; builds the C extensions)"
  # A C source that no longer compiles must not leave its previous build importable: remove the
  # built extensions first, build them strictly, and only if that fails install without the
  # ones that failed (their Python fallbacks run), saying so.
  find host -name '_*.cpython-*.so' -delete
  log="$VENV/.netco-build.log"
  if ! NETCO_C_REQUIRED=1 "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
      -e ".[dev]" >"$log" 2>&1; then
    why=$(grep -m1 -oE '[^ ]+\.[ch]:[0-9]+:[0-9]+: (fatal )?error: .*' "$log" || true)
    say "the install with every C extension failed (${why:-no compiler error; see $log})"
    say "installing again without the ones that fail: their Python fallbacks run, slower"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[dev]"
  fi
  touch "$stamp"
fi
# ./dev.sh test: the Debian packages of the binaries the tests run (host/tools.py TEST_TOOLS).
# As root with apt-get, install those missing (NETCO_APT=0: don't); otherwise say which are
# missing: the tests that need them skip, naming the package.
if [ "${1:-}" = test ]; then
  sbin=$PATH; [ "$(id -u)" = 0 ] || sbin="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
  need=$(PATH=$sbin "$VENV/bin/python" -m host.tools --missing 2>/dev/null || true)
  if [ -n "$need" ] && [ "$(id -u)" = 0 ] && [ "${NETCO_APT:-1}" != 0 ] && command -v apt-get >/dev/null; then
    say "installing the Debian packages the tests use: $need (apt-get; NETCO_APT=0 skips this)"
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive \
           apt-get install -y -qq --no-install-recommends $need >/dev/null 2>&1; } \
      || say "apt-get install $need failed: the tests needing them skip, naming the package"
  elif [ -n "$need" ]; then
    why="not root"; [ "$(id -u)" != 0 ] || why="NETCO_APT=0 or no apt-get"
    say "not installed ($why): $need; the tests needing them skip (apt-get install $need)"
  fi
fi
# Mininet comes from Debian (apt-get install mininet); let the venv import it, also when it was
# installed after the venv.
debian=/usr/lib/python3/dist-packages
if [ -d "$debian/mininet" ]; then
  pth="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/debian-mininet.pth"
  if [ ! -f "$pth" ]; then
    say "letting $VENV import Debian's Mininet ($pth)"
    echo "$debian" > "$pth"
  fi
fi
cmd=${1:-demo}
[ $# -gt 0 ] && shift
case "$cmd" in
  test) exec "$VENV/bin/python" -m pytest "$@" ;;
  *) exec "$VENV/bin/netco" "$cmd" "$@" ;;
esac
