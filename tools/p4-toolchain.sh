#!/usr/bin/env bash
# Build the open-source P4 toolchain netco's BMv2/p4c tests and `--target bmv2` need: PI, BMv2
# (simple_switch_grpc with Thrift, nanomsg and gRPC) and p4c's BMv2 backend, at pinned versions,
# on Debian 12, into a prefix (default /opt/p4tools). Run it as `./dev.sh p4 [options]`;
# `--help` lists the options, `--dry-run` the steps. Each step leaves a stamp under
# PREFIX/.stamps naming the pinned versions it built; a second run skips those (seconds).
set -euo pipefail

# ---- Pinned versions: the one place they live (README "P4 toolchain" names them too) --------
PI_COMMIT=f96af95e090619491e3abf2df69df340c2c9cb46      # p4lang/PI main; BMv2's CI builds PI main
BMV2_TAG=1.15.5                                          # p4lang/behavioral-model
BMV2_COMMIT=693e69e634fedf007964a069fdd69acc441a5f80
P4C_TAG=v1.2.4.8                                         # p4lang/p4c
P4C_COMMIT=32893b7e879db9e1c368d3568d41cb3d20c034d0
P4RUNTIME_COMMIT=1e771c4e05c4e7e250df00212b3ca02ee3202d71  # p4c's FetchContent(p4runtime) pin
PI_URL=https://github.com/p4lang/PI.git
BMV2_URL=https://github.com/p4lang/behavioral-model.git
P4C_URL=https://github.com/p4lang/p4c.git
P4RUNTIME_URL=https://github.com/p4lang/p4runtime.git
# Debian 12 packages (build + run). libxxhash-dev and libjsoncpp-dev: BMv2's configure fails without.
APT_PACKAGES=(build-essential cmake autoconf automake libtool libtool-bin pkg-config bison flex git
  libboost-all-dev libgmp-dev libpcap-dev libgc-dev libfl-dev libjudy-dev libreadline-dev libssl-dev
  libevent-dev libffi-dev libxxhash-dev libjsoncpp-dev libabsl-dev
  libprotobuf-dev libprotoc-dev protobuf-compiler libgrpc++-dev libgrpc-dev protobuf-compiler-grpc
  libnanomsg-dev libthrift-dev thrift-compiler python3 python3-dev python3-thrift python3-six)

# step id | what | minutes on 2 cores (measured on the reference machine, load from other jobs)
STEPS=(apt sources pi bmv2 p4c link smoke)
declare -A WHAT=([apt]="Debian packages (apt-get)" [sources]="PI, BMv2, p4c and p4runtime sources"
  [pi]="PI $PI_COMMIT" [bmv2]="BMv2 $BMV2_TAG" [p4c]="p4c $P4C_TAG (BMv2 backend, p4test)"
  [link]="tools onto PATH" [smoke]="smoke test (simple_switch_grpc + p4c)")
declare -A MINUTES=([apt]=2 [sources]=1 [pi]=4 [bmv2]=12 [p4c]=11 [link]=1 [smoke]=1)

usage() {
  cat <<EOF
usage: ./dev.sh p4 [options]     (or tools/p4-toolchain.sh [options])

Builds PI, BMv2 $BMV2_TAG (simple_switch_grpc: Thrift, nanomsg, gRPC) and p4c $P4C_TAG
(BMv2 backend) on Debian 12 into PREFIX, then runs a smoke test. About 25 min on 2 cores
(longer on a busy machine), 0.7 GB under PREFIX (build trees included). Idempotent:
finished steps are skipped (stamps in PREFIX/.stamps).

options:
  --prefix DIR   install prefix (default: \$NETCO_P4_PREFIX or /opt/p4tools)
  --src DIR      build from local source trees instead of cloning from GitHub:
                   DIR/PI                PI at $PI_COMMIT, with its submodules
                                         (proto/p4runtime, proto/openconfig/{gnmi,public},
                                         third_party/{uthash,googletest}) filled in
                   DIR/behavioral-model  BMv2 $BMV2_TAG
                   DIR/p4c               p4c $P4C_TAG
                   DIR/p4runtime         p4runtime at $P4RUNTIME_COMMIT (p4c fetches it
                                         at configure time otherwise)
                 (what \`git clone --recursive\` of each gives, or \`git archive\` exports)
  --jobs N       parallel compile jobs (default: number of CPUs)
  --no-apt       do not run apt-get; print the command and check the packages are there
                 (also what happens when not root)
  --force        rebuild even when a step's stamp says it is done
  --only STEP    run one step: ${STEPS[*]}
  --dry-run      list the steps, pinned versions and what would be skipped; change nothing
  -h, --help     this help
EOF
}

say() { echo "p4-toolchain: $*"; }
die() { echo "p4-toolchain: $1" >&2; exit "${2:-1}"; }

PREFIX=${NETCO_P4_PREFIX:-/opt/p4tools}
SRC=""
JOBS=$(nproc 2>/dev/null || echo 2)
NO_APT=0; FORCE=0; ONLY=""; DRY=0
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --prefix|--src|--jobs|--only)
      if [ $# -lt 2 ] || [ -z "$2" ] || [[ $2 == -* ]]; then die "$1 needs a value (see --help)" 2; fi
      case "$1" in
        --prefix) PREFIX=$2 ;; --src) SRC=$2 ;; --jobs) JOBS=$2 ;; --only) ONLY=$2 ;;
      esac
      shift 2 ;;
    --no-apt) NO_APT=1; shift ;;
    --force) FORCE=1; shift ;;
    --dry-run) DRY=1; shift ;;
    *) die "unknown option '$1' (see ./dev.sh p4 --help)" 2 ;;
  esac
done
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || die "--jobs must be a positive integer, got '$JOBS'" 2
if [ -n "$ONLY" ] && [[ " ${STEPS[*]} " != *" $ONLY "* ]]; then
  die "--only must be one of: ${STEPS[*]} (got '$ONLY')" 2
fi
case "$PREFIX" in /*) ;; *) PREFIX="$PWD/$PREFIX" ;; esac

# --src: every component there, at the pinned version where the tree says which it is.
src_problem() {
  local d=$1 need
  for need in PI/autogen.sh PI/proto/p4runtime/proto/p4/v1/p4runtime.proto \
      PI/proto/openconfig/gnmi/proto/gnmi/gnmi.proto PI/proto/openconfig/public/release \
      PI/third_party/uthash/src/uthash.h PI/third_party/googletest/googletest \
      behavioral-model/autogen.sh behavioral-model/VERSION p4c/CMakeLists.txt p4c/Version.txt \
      p4runtime/proto/p4/v1/p4runtime.proto; do
    if [ ! -e "$d/$need" ]; then
      echo "--src $d lacks $need (layout: see --help)"; return
    fi
  done
  local v
  v=$(tr -d '[:space:]' <"$d/behavioral-model/VERSION")
  [ "$v" = "$BMV2_TAG" ] || { echo "--src $d/behavioral-model is BMv2 $v, pinned is $BMV2_TAG"; return; }
  v=$(tr -d '[:space:]' <"$d/p4c/Version.txt")
  [ "v$v" = "$P4C_TAG" ] || { echo "--src $d/p4c is p4c $v, pinned is ${P4C_TAG#v}"; return; }
  local name want
  for name in PI:$PI_COMMIT behavioral-model:$BMV2_COMMIT p4c:$P4C_COMMIT p4runtime:$P4RUNTIME_COMMIT; do
    want=${name#*:}; name=${name%%:*}
    if [ -e "$d/$name/.git" ]; then
      v=$(git -C "$d/$name" rev-parse HEAD 2>/dev/null || true)
      [ "$v" = "$want" ] || { echo "--src $d/$name is at commit ${v:-?}, pinned is $want"; return; }
    fi
  done
}
if [ -n "$SRC" ]; then
  case "$SRC" in /*) ;; *) SRC="$PWD/$SRC" ;; esac
  [ -d "$SRC" ] || die "--src $SRC is not a directory" 2
  problem=$(src_problem "$SRC")
  [ -z "$problem" ] || die "$problem" 2
fi

# What each step's stamp records: the pins (and options) its result depends on.
pin_of() {
  case "$1" in
    apt) echo "packages ${APT_PACKAGES[*]}" ;;
    sources) echo "PI $PI_COMMIT BMv2 $BMV2_COMMIT p4c $P4C_COMMIT p4runtime $P4RUNTIME_COMMIT" ;;
    pi) echo "PI $PI_COMMIT prefix $PREFIX" ;;
    bmv2) echo "BMv2 $BMV2_COMMIT PI $PI_COMMIT prefix $PREFIX" ;;
    p4c) echo "p4c $P4C_COMMIT p4runtime $P4RUNTIME_COMMIT prefix $PREFIX" ;;
    link) echo "prefix $PREFIX uid $(id -u)" ;;
    smoke) echo "always" ;;
  esac
}
STAMPS=$PREFIX/.stamps
LOGS=$PREFIX/logs
done_already() {  # smoke runs every time (a few seconds): it is the check that the rest works
  [ "$1" != smoke ] && [ "$FORCE" = 0 ] && [ -f "$STAMPS/$1" ] && [ "$(cat "$STAMPS/$1")" = "$(pin_of "$1")" ]
}

if [ "$DRY" = 1 ]; then
  say "dry run: prefix $PREFIX, sources ${SRC:-from GitHub (git clone)}, $JOBS jobs"
  say "pinned: PI $PI_COMMIT; BMv2 $BMV2_TAG ($BMV2_COMMIT); p4c $P4C_TAG ($P4C_COMMIT); p4runtime for p4c $P4RUNTIME_COMMIT"
  k=0
  for s in "${STEPS[@]}"; do
    k=$((k + 1))
    [ -z "$ONLY" ] || [ "$ONLY" = "$s" ] || continue
    if done_already "$s"; then state="done (stamp), skipped"; else state="would run"; fi
    say "[$k/${#STEPS[@]}] $s: ${WHAT[$s]} (about ${MINUTES[$s]} min on 2 cores): $state"
  done
  exit 0
fi

IS_ROOT=0; [ "$(id -u)" = 0 ] && IS_ROOT=1
if ! mkdir -p "$PREFIX" 2>/dev/null || [ ! -w "$PREFIX" ]; then
  die "cannot write to $PREFIX: run as root, or pick a writable --prefix (e.g. --prefix \$HOME/p4tools)" 2
fi
mkdir -p "$STAMPS" "$LOGS" "$PREFIX/src" "$PREFIX/build"

# Builds use Debian's python3 (/usr/bin first: a pyenv or venv python3 lacks python3-thrift and
# the protobuf/grpc modules autotools checks for) and run at the lowest CPU (and I/O) priority.
export PATH="$PREFIX/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
NICE=(nice -n 19)
command -v ionice >/dev/null && NICE+=(ionice -c3)
LOG=/dev/null
run() { "${NICE[@]}" "$@" >>"$LOG" 2>&1; }

step_apt() {
  local missing=() p
  if command -v dpkg-query >/dev/null; then
    for p in "${APT_PACKAGES[@]}"; do
      dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
    done
  else
    missing=("${APT_PACKAGES[@]}")
  fi
  [ ${#missing[@]} -gt 0 ] || { say "  all ${#APT_PACKAGES[@]} Debian packages are installed"; return 0; }
  local line="apt-get install -y --no-install-recommends ${missing[*]}"
  if [ "$NO_APT" = 1 ] || [ "$IS_ROOT" = 0 ]; then
    say "  missing Debian packages; as root run:"
    echo "    $line"
    return 3
  fi
  say "  installing ${#missing[@]} packages: ${missing[*]}"
  echo "+ apt-get update && $line" >>"$LOG"
  # tshark/wireshark-common may come along: answer its debconf question without a prompt.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null || true
  DEBIAN_FRONTEND=noninteractive apt-get update >>"$LOG" 2>&1
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >>"$LOG" 2>&1
}

# One source tree into PREFIX/src/NAME: copied from --src, or cloned at the pinned commit.
get_source() {
  local name=$1 url=$2 ref=$3 commit=$4 dest=$PREFIX/src/$1
  rm -rf "$dest"
  if [ -n "$SRC" ]; then
    echo "+ cp -a $SRC/$name $dest" >>"$LOG"
    cp -a "$SRC/$name" "$dest"
  else
    {
      echo "+ git clone $url $dest; checkout $commit"
      git clone --quiet "$url" "$dest"
      git -C "$dest" -c advice.detachedHead=false checkout --quiet "$commit"
      git -C "$dest" submodule update --init --recursive
    } >>"$LOG" 2>&1
    [ -z "$ref" ] || [ "$(git -C "$dest" rev-parse "$ref^{commit}")" = "$commit" ] ||
      { echo "tag $ref of $url is not $commit" >>"$LOG"; return 1; }
  fi
}

step_sources() {
  if [ -z "$SRC" ]; then
    command -v git >/dev/null || { say "  git is missing (apt-get install git)"; return 1; }
    say "  cloning from GitHub into $PREFIX/src"
  else
    say "  copying from $SRC into $PREFIX/src"
  fi
  get_source PI "$PI_URL" "" "$PI_COMMIT"
  get_source behavioral-model "$BMV2_URL" "$BMV2_TAG" "$BMV2_COMMIT"
  get_source p4c "$P4C_URL" "$P4C_TAG" "$P4C_COMMIT"
  get_source p4runtime "$P4RUNTIME_URL" "" "$P4RUNTIME_COMMIT"
}

step_pi() {
  cd "$PREFIX/src/PI"
  run ./autogen.sh
  # As BMv2's own CI builds PI: protobuf/gRPC front end, no CLI, no internal RPC, no bmv2 target.
  run ./configure --prefix="$PREFIX" --with-proto --without-internal-rpc --without-cli \
    --without-bmv2 --disable-static PYTHON=/usr/bin/python3 CFLAGS=-O2 CXXFLAGS=-O2
  run make -j"$JOBS"
  run make install
}

# BMv2: only what simple_switch and simple_switch_grpc need (top-level SUBDIRS order), not
# psa_switch, pna_nic, simple_router, l2_switch or the tests.
BMV2_DIRS=(thrift_src third_party proto src include PI services targets/simple_switch
  targets/simple_switch_grpc tools)
step_bmv2() {
  cd "$PREFIX/src/behavioral-model"
  run ./autogen.sh
  # --disable-static: libtool would otherwise compile every object twice.
  run ./configure --prefix="$PREFIX" --with-pi --with-thrift --with-nanomsg --disable-static \
    PYTHON=/usr/bin/python3 CFLAGS=-O2 CXXFLAGS=-O2 CPPFLAGS="-I$PREFIX/include" \
    LDFLAGS="-L$PREFIX/lib -Wl,-rpath,$PREFIX/lib"
  local d
  for d in "${BMV2_DIRS[@]}"; do [ ! -f "$d/Makefile" ] || run make -j"$JOBS" -C "$d"; done
  for d in "${BMV2_DIRS[@]}"; do [ ! -f "$d/Makefile" ] || run make -C "$d" install; done
  # The Python CLIs say `#!/usr/bin/env python3`, which may be a pyenv/venv python without the
  # thrift module; Debian's python3 has it (python3-thrift).
  local f
  for f in simple_switch_CLI bm_CLI bm_p4dbg bm_nanomsg_events; do
    [ -f "$PREFIX/bin/$f" ] && sed -i '1s|^#!/usr/bin/env python3$|#!/usr/bin/python3|' "$PREFIX/bin/$f"
  done
  "$PREFIX/bin/simple_switch_grpc" --version >>"$LOG" 2>&1
}

step_p4c() {
  local build=$PREFIX/build/p4c
  rm -rf "$build"
  # The source may be an export without .git: give CMake the version `git rev-parse` would.
  # p4runtime comes from PREFIX/src (no download); protobuf is Debian's, not a fetched one.
  P4C_VERSION="${P4C_TAG#v} (SHA: ${P4C_COMMIT:0:9} BUILD: Release)" run cmake \
    -S "$PREFIX/src/p4c" -B "$build" -DCMAKE_INSTALL_PREFIX="$PREFIX" -DCMAKE_BUILD_TYPE=Release \
    -DENABLE_BMV2=ON -DENABLE_P4TEST=ON -DENABLE_EBPF=OFF -DENABLE_UBPF=OFF -DENABLE_DPDK=OFF \
    -DENABLE_P4TC=OFF -DENABLE_P4C_GRAPHS=OFF -DENABLE_GTESTS=OFF -DENABLE_TEST_TOOLS=OFF \
    -DENABLE_DOCS=OFF -DCMAKE_UNITY_BUILD=ON \
    -DP4C_USE_PREINSTALLED_PROTOBUF=ON -DENABLE_PROTOBUF_STATIC=OFF \
    -DFETCHCONTENT_FULLY_DISCONNECTED=ON -DFETCHCONTENT_SOURCE_DIR_P4RUNTIME="$PREFIX/src/p4runtime"
  run make -C "$build" -j"$JOBS"
  run make -C "$build" install
  "$PREFIX/bin/p4c" --version >>"$LOG" 2>&1
}

step_link() {
  cat >"$PREFIX/env.sh" <<EOF
# . $PREFIX/env.sh  puts the P4 toolchain (PI, BMv2 $BMV2_TAG, p4c $P4C_TAG) on PATH.
# (PREFIX/lib/python3*/site-packages is left off PYTHONPATH on purpose: PI's generated google/
# package there would shadow google.protobuf; BMv2's CLIs find their modules themselves.)
case ":\$PATH:" in *":$PREFIX/bin:"*) ;; *) export PATH="$PREFIX/bin:\$PATH" ;; esac
EOF
  if [ "$IS_ROOT" = 1 ] && [ "$PREFIX" != /usr/local ]; then
    local f n=0 dest
    for f in "$PREFIX"/bin/*; do
      if [ ! -f "$f" ] || [ ! -x "$f" ]; then continue; fi
      dest=/usr/local/bin/$(basename "$f")
      if [ -e "$dest" ] && [ ! -L "$dest" ]; then
        say "  leaving $dest alone (not a link)"; continue
      fi
      ln -sfn "$f" "$dest"; n=$((n + 1))
    done
    echo "$PREFIX/lib" >/etc/ld.so.conf.d/netco-p4tools.conf
    ldconfig
    say "  linked $n tools into /usr/local/bin; $PREFIX/lib in /etc/ld.so.conf.d/netco-p4tools.conf"
  else
    say "  not root: put $PREFIX/bin on PATH (. $PREFIX/env.sh); ./dev.sh does it itself when"
    say "  NETCO_P4_PREFIX=$PREFIX (or the prefix is /opt/p4tools)"
  fi
}

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

step_smoke() {
  local tmp grpc thrift pid ok=0
  tmp=$(mktemp -d)
  grpc=$(free_port); thrift=$(free_port)
  cd "$tmp"
  "$PREFIX/bin/simple_switch_grpc" --no-p4 --thrift-port "$thrift" -- \
    --grpc-server-addr "127.0.0.1:$grpc" >"$tmp/switch.log" 2>&1 &
  pid=$!
  # shellcheck disable=SC2064  # expand now: the PID and folder of this run
  trap "kill $pid 2>/dev/null; rm -rf '$tmp'" EXIT
  for _ in $(seq 1 60); do
    kill -0 "$pid" 2>/dev/null || break
    if (exec 3<>"/dev/tcp/127.0.0.1/$grpc") 2>/dev/null; then ok=1; break; fi
    sleep 0.5
  done
  cat "$tmp/switch.log" >>"$LOG"
  [ "$ok" = 1 ] || { echo "simple_switch_grpc (pid $pid) did not listen on 127.0.0.1:$grpc" >>"$LOG"; return 1; }
  say "  simple_switch_grpc (pid $pid) listens for gRPC on 127.0.0.1:$grpc"
  echo show_ports | timeout 30 "$PREFIX/bin/simple_switch_CLI" --thrift-port "$thrift" >>"$LOG" 2>&1
  say "  simple_switch_CLI answered on Thrift port $thrift"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'" EXIT
  cat >"$tmp/smoke.p4" <<'EOF'
#include <core.p4>
#include <v1model.p4>
header ethernet_t { bit<48> dst; bit<48> src; bit<16> type; }
struct headers_t { ethernet_t eth; }
struct meta_t { }
parser P(packet_in pkt, out headers_t h, inout meta_t m, inout standard_metadata_t sm) {
  state start { pkt.extract(h.eth); transition accept; }
}
control VC(inout headers_t h, inout meta_t m) { apply { } }
control I(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
  action fwd(bit<9> port) { sm.egress_spec = port; }
  table dmac { key = { h.eth.dst : exact; } actions = { fwd; NoAction; } default_action = NoAction(); }
  apply { dmac.apply(); }
}
control E(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control CC(inout headers_t h, inout meta_t m) { apply { } }
control D(packet_out pkt, in headers_t h) { apply { pkt.emit(h.eth); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
EOF
  run "$PREFIX/bin/p4c" --target bmv2 --arch v1model --p4runtime-files "$tmp/smoke.p4info.txtpb" \
    -o "$tmp/out" "$tmp/smoke.p4"
  if [ ! -s "$tmp/out/smoke.json" ] || ! grep -q dmac "$tmp/smoke.p4info.txtpb"; then
    echo "p4c wrote no smoke.json / P4Info naming the table dmac" >>"$LOG"; return 1
  fi
  say "  p4c compiled a v1model program for bmv2 (JSON + P4Info)"
}

total_start=$(date +%s)
k=0
for s in "${STEPS[@]}"; do
  k=$((k + 1))
  [ -z "$ONLY" ] || [ "$ONLY" = "$s" ] || continue
  if done_already "$s"; then
    say "[$k/${#STEPS[@]}] ${WHAT[$s]}: done already ($STAMPS/$s), skipped"
    continue
  fi
  say "[$k/${#STEPS[@]}] ${WHAT[$s]} (about ${MINUTES[$s]} min on 2 cores)"
  LOG=$LOGS/$s.log
  : >"$LOG"
  t0=$(date +%s)
  # errexit is ignored in a subshell whose status is tested (`( ... ) || rc=$?`), so test after.
  set +e
  ( set -euo pipefail; "step_$s" )
  rc=$?
  set -e
  t=$(( $(date +%s) - t0 ))
  if [ "$rc" != 0 ]; then
    die "step [$k/${#STEPS[@]}] $s (${WHAT[$s]}) failed after ${t}s (exit $rc); log: $LOG" 1
  fi
  [ "$s" = smoke ] || pin_of "$s" >"$STAMPS/$s"
  say "  $s done in $((t / 60)) min $((t % 60)) s"
done
t=$(( $(date +%s) - total_start ))
say "finished in $((t / 60)) min $((t % 60)) s; tools in $PREFIX/bin"
