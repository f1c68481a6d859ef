#!/usr/bin/env bash
# Run a pytest selection K times while CPU hogs keep every core busy, to show a test
# does not depend on how fast the machine is (issue 9, defect 11: a test that passes
# on an idle machine and fails on a loaded one asserts a timing accident).
#
#   hack/underload.sh [-r K] [-n N] [-l LOGDIR] [--] PYTEST_ARGS...
#
#   -r K       runs (default 10); each run is a fresh pytest process (a fresh test cluster)
#   -n N       CPU hogs (default 2 x the cores, `nproc`); -n 0 runs without load
#   -l LOGDIR  keep each run's output as LOGDIR/run-<i>.log (default: a temp dir, kept)
#   pytest's own options (its -k too) go after `--`
#
# Example (what `make test` sets, then ten loaded runs of one test):
#   export NETATTACH_EXE=$PWD/dist/netattach/netattach \
#     NETATTACH_K8S_BIN=/root/.cache/netattach/testbin/k8s-v1.34.4-etcd-v3.6.4 \
#     NETATTACH_CNI_BIN=/root/.cache/netattach/testbin/cni-v1.9.1 \
#     NETATTACH_CONTAINERD_BIN=/root/.cache/netattach/testbin/containerd-v2.2.9
#   hack/underload.sh -r 10 tests/e2e/test_faults_children.py::test_netattach_killed_before_the_status_patch
#
# The hogs are plain busy loops (`yes > /dev/null`), nothing to install, at the same
# priority as the tests. They are killed on every way out: success, failure, Ctrl-C
# (pytest tears down, then the hogs go), TERM (acted on when the current run ends),
# and SIGKILL of this script (through setpriv's parent-death signal). Prints one line
# per run and then "passed X of K"; exits 0 only when every run passed.
# The body is one { } block, parsed whole before it runs: bash reads a script as it
# goes, so editing this file during a long run would otherwise break that run.
{
set -u

runs=10
hogs=$(( 2 * $(nproc) ))
logdir=""
while [ $# -gt 0 ]; do
  case "$1" in
    -r) runs=$2; shift 2 ;;
    -n) hogs=$2; shift 2 ;;
    -l) logdir=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) break ;;
  esac
done
if [ $# -eq 0 ]; then
  echo "usage: $0 [-r K] [-n N] [-l LOGDIR] [--] PYTEST_ARGS..." >&2
  exit 2
fi

repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$repo/.venv/bin/python}
[ -n "$logdir" ] || logdir=$(mktemp -d /tmp/underload.XXXXXX)
mkdir -p "$logdir"

hog_pids=()
stop_hogs() {
  local pid
  for pid in "${hog_pids[@]}"; do
    kill "$pid" 2>/dev/null
  done
  for pid in "${hog_pids[@]}"; do
    wait "$pid" 2>/dev/null
  done
  hog_pids=()
}
trap stop_hogs EXIT
trap 'stop_hogs; trap - INT; kill -INT $$' INT
trap 'stop_hogs; exit 143' TERM

# With setpriv (util-linux), a hog also dies with this script if it is SIGKILLed.
pdeathsig=()
command -v setpriv > /dev/null && pdeathsig=(setpriv --pdeathsig KILL --)
for _ in $(seq "$hogs"); do
  "${pdeathsig[@]}" yes > /dev/null &
  hog_pids+=("$!")
done
echo "underload: $hogs CPU hogs on $(nproc) cores; $runs runs of: pytest $*; logs in $logdir"

passed=0
for i in $(seq "$runs"); do
  log="$logdir/run-$i.log"
  start=$SECONDS
  (cd "$repo" && "$python" -m pytest -p no:cacheprovider "$@") > "$log" 2>&1
  rc=$?
  # pytest's closing line, with its ===== borders or (-q) without
  summary=$(grep -E '^(=+ )?[0-9]+ (passed|failed|errors?|skipped)|no tests ran' "$log" | tail -1 |
            sed -E 's/^=+ | =+$//g')
  if [ $rc -eq 0 ]; then
    passed=$((passed + 1))
    echo "run $i: ok ($((SECONDS - start)) s) ${summary}"
  else
    echo "run $i: FAILED rc=$rc ($((SECONDS - start)) s) ${summary}"
    grep -E '^(FAILED|ERROR) ' "$log" | sed 's/^/    /'
  fi
done

stop_hogs
echo "passed $passed of $runs"
[ "$passed" -eq "$runs" ]
exit $?
}
