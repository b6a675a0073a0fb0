#!/usr/bin/env bash
# The README's quick start: ./dev.sh demo | ./dev.sh test [pytest args] | ./dev.sh <netco args>
#
# Creates .venv (once), installs netco with its test extras into it (again only when
# pyproject.toml, setup.py or the C kernels changed) and runs the command.
# torch: a torch already in the venv is kept. Otherwise NETCO_TORCH is installed, by default
# torch==2.13.0 (a CPU wheel on the reference machines' local disk; elsewhere pip picks the
# build for your platform). Any torch >= 2.1 works: NETCO_TORCH='torch>=2.1' ./dev.sh demo
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
VENV=${NETCO_VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV" || { echo "dev.sh: '$PY -m venv' failed; on Debian: apt-get install python3-venv" >&2; exit 2; }
fi
if ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${NETCO_TORCH:-torch==2.13.0}"
fi
stamp="$VENV/.netco-installed"
if [ ! -f "$stamp" ] || [ -n "$(find pyproject.toml setup.py host/thc/_fused.c -newer "$stamp" 2>/dev/null)" ]; then
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[dev]"
  touch "$stamp"
fi
# Mininet comes from Debian (apt-get install mininet); let the venv import it, also when it
# was installed after the venv (checked on every run, without starting Python).
if [ -f /usr/lib/python3/dist-packages/mininet/net.py ]; then
  for sp in "$VENV"/lib/python3*/site-packages; do
    [ -f "$sp/debian-mininet.pth" ] || echo /usr/lib/python3/dist-packages > "$sp/debian-mininet.pth"
  done
fi
cmd=${1:-demo}
[ $# -gt 0 ] && shift
case "$cmd" in
  test) exec "$VENV/bin/python" -m pytest "$@" ;;
  *) exec "$VENV/bin/netco" "$cmd" "$@" ;;
esac
