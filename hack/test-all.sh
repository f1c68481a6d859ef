#!/usr/bin/env bash
# `make test` with no PYTEST_ARGS: every test of tests/, exactly once, in three pytest
# runs that overlap where the machine would otherwise wait. Measured, warm `.ci/run` of
# a clean clone on 2 CPUs (2026-11-29): 25:49 with one pytest run after the build
# (pytest 22:59), 13:53 so (the build and the unit tier 2:18, then 11:35 for the other
# two runs side by side, 10:58 and 11:29 of pytest's own time).
#
#   1. tests/unit (pure logic, CPU-bound, about 2 min) runs while `make` does the static
#      checks, the test bed, the build and the image, which it needs none of. It runs without
#      NETATTACH_EXE: its few CLI tests (`netattach validate`) exec the virtualenv's
#      console script, not the artifact `make` builds meanwhile. (From a cold cache the
#      build ends some 25 minutes after the unit tier: with the artifact they failed,
#      2026-11-29; warm, the build used to win the race.)
#   2. tests/node (one real single-node cluster, started once: containerd, kubelet and the
#      control plane, mostly waiting on them) runs beside
#   3. the rest of tests/ (e2e, integration, image): the node owns its own mount
#      namespace, addresses and ports (testbed/netattach_testbed/node.py), and nothing
#      else starts a real node.
#      The e2e tests that start a containerd on the machine (HOST_CONTAINERD) run in the
#      node's run, before its first test starts the node: the node's mount namespace
#      needs /run/containerd on the machine as its mount point while it runs, and such a
#      containerd puts its shims' sockets there and removes the dir when it made it
#      (testbed/netattach_testbed/runtime.py), which would take the node's mount away.
#      The two harness tests of the benches (BALANCE: about 110 s of a warm run, their
#      own API servers and processes) run there too, before the node, so that both
#      runs end at about the same time.
#
# The runs each write their output to build/test-logs/<run>.log; the last one's goes to
# the terminal as it runs and the other two are printed whole as soon as they end, never
# interleaved. Each prints its own slowest phases (--durations). The exit status is
# non-zero when any run failed (or collected nothing: pytest's 5), after all have run.
#
# Usage (the Makefile's `test` target sets the environment: NETATTACH_EXE, the test
# bed's and the image's variables): MAKE=make PY=.venv/bin/python hack/test-all.sh
#   PREP: the make targets to run beside the unit tier (the Makefile passes them).
set -uo pipefail
cd "$(dirname "$0")/.."

: "${MAKE:=make}" "${PY:=.venv/bin/python}" "${PREP:?the make targets run beside the unit tier}"
LOGS=build/test-logs
HOST_CONTAINERD=(tests/e2e/test_runtime_containerd.py tests/e2e/test_uninstall_containerd.py)
BALANCE=(tests/integration/test_bench_cluster_harness.py tests/e2e/test_bench_harness.py)
BEFORE_NODE=("${HOST_CONTAINERD[@]}" "${BALANCE[@]}")
mkdir -p "$LOGS"
rm -f "$LOGS"/*.log

stamp() { date -u +%H:%M:%S; }
status=0
summary=()
# A background job of a shell without job control starts with SIGINT ignored, and Python
# then leaves it so: pytest would never see ^C, and the node tier's fixtures (a kubelet,
# containerd) would outlive the run. Its handler is put back, so ^C reaches every run
# (one process group) and each tears its fixtures down.
PYTEST_BG=(-c 'import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler)
runpy.run_module("pytest", run_name="__main__", alter_sys=True)')
PREFIX=()  # run(): what goes before the interpreter (env ... for the unit tier)
run() {  # <name> <pytest args...>: pytest in the background, its output to its log
  local name=$1
  shift
  {
    t0=$(date +%s)
    "${PREFIX[@]}" "$PY" "${PYTEST_BG[@]}" "$@"
    rc=$?
    echo "[$name: pytest exit $rc after $(( $(date +%s) - t0 )) s, ended $(stamp)]"
    exit "$rc"
  } >"$LOGS/$name.log" 2>&1 &
}
finish() {  # <name> <pid>: wait for it, print its log, record the outcome
  local name=$1 rc
  wait "$2"
  rc=$?
  echo
  echo "=================== $name: pytest's output ($LOGS/$name.log) ==================="
  cat "$LOGS/$name.log"
  summary+=("$(tail -n 1 "$LOGS/$name.log")")
  if [ "$rc" -ne 0 ]; then status=1; fi
}

echo "$(stamp) tests/unit starts, beside: make $PREP"
PREFIX=(env -u NETATTACH_EXE)
run unit tests/unit --durations=10
unit=$!
PREFIX=()
# Two targets at a time: each Go build keeps both CPUs busy while it compiles, but not
# while it downloads its modules or links, nor do the image's Debian downloads, pip's
# installs, PyInstaller or mypy; those now overlap another target's compiling. Each
# command's output comes whole (--output-sync=line), never interleaved. From empty
# caches (a clean clone, an empty HOME, 2 CPUs, 2026-11-29) the preparation took 28:25
# so, against 31:47 one target at a time; the whole `make test` 40:03 against 45:35.
# shellcheck disable=SC2086  # PREP is a list of targets
$MAKE -j2 --output-sync=line $PREP
prep=$?
finish unit "$unit"
if [ "$prep" -ne 0 ]; then
  echo "make $PREP failed (exit $prep): the other tiers need it"
  exit "$prep"
fi

echo
echo "$(stamp) ${BEFORE_NODE[*]} and then tests/node start (their output follows), beside the rest of tests/"
# pytest runs the files in the order given; the node starts at its first test
run node "${BEFORE_NODE[@]}" tests/node --durations=20
node=$!
t_rest=$(date +%s)
"$PY" -m pytest --durations=30 --ignore=tests/unit --ignore=tests/node \
  "${BEFORE_NODE[@]/#/--ignore=}" 2>&1 | tee "$LOGS/rest.log"
rest=${PIPESTATUS[0]}
summary+=("[rest: pytest exit $rest after $(( $(date +%s) - t_rest )) s, ended $(stamp)]")
if [ "$rest" -ne 0 ]; then status=1; fi
echo "$(stamp) the rest of tests/ ended; waiting for tests/node"
finish node "$node"

echo
echo "$(stamp) make test:"
printf '  %s\n' "${summary[@]}"
exit "$status"
