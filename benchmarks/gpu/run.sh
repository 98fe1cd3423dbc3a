#!/usr/bin/env bash
# The prepared GPU run: install the loader's wheels if needed, measure the GPU
# bundle on this machine's GPU (`boo-build measure`), check the loader's
# stream ordering, and write the results. Built to run once, unattended, on a
# machine with an NVIDIA GPU, Python 3.12 and torch but no network; about
# 4 minutes (BUDGET bounds the measuring, torch.compile warm-ups included).
#
#   benchmarks/gpu/run.sh [--cpu | --vulkan] [--bundle FILE] [--out DIR] [--targets T]
#
#   --cpu       measure the CPU target instead (local-task): the same steps,
#               so the script is known to work before the GPU run (tests/)
#   --vulkan    measure a Vulkan target on the Vulkan device (default target
#               vulkan-llvmpipe: Mesa's software GPU, as the tests run it)
#   --bundle    default benchmarks/gpu/bundle/gpu-norms-0.1.0.tar.zst
#   --out       results folder (default $OUT, else benchmarks/gpu/results):
#               results.md, results.json, measured.tar.zst, ordering.md,
#               ordering-async.md (GPU), device.txt, summary.md, and all of
#               them again in one archive, results.tar.gz (at most 8 files:
#               where only one comes back, that one holds everything). Files
#               of these names from an earlier run are removed first.
#   --targets   bundle targets to measure (default sm_80; cpu with --cpu)
#
# Environment: PYTHON (default python3), BUDGET (seconds for `measure`,
# default 150), COMPILE_BUDGET (seconds of torch.compile baselines, default 60).
# Exit status: 0 all passed, else the first failing step's status.
set -uo pipefail

# The budgets, for one run of about 4 minutes on the device machine. measure
# checks BUDGET before each kernel, against its whole run (torch.compile
# included), so it ends at most one kernel past it: BUDGET=150 leaves about a
# minute and a half for the rest (wheels, imports, the device listing, the two
# loader checks, the archive). Of those 150 s, torch.compile baselines take
# COMPILE_BUDGET=60 at most (checked before each; one Inductor compile per
# kernel, several seconds each, the first with Inductor's start-up): a few
# kernels get that column, the rest say "skipped: torch.compile budget ...
# spent". The other 90 s validate every shipped module (aten, manual, each
# variant) against float64 and time them in paired rounds: a few seconds a
# kernel, about 20 kernels in the GPU bundle. Validation matters most (no GPU
# has run these kernels), torch.compile's column least.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PY=${PYTHON:-python3}
MODE=gpu
BUNDLE=$ROOT/benchmarks/gpu/bundle/gpu-norms-0.1.0.tar.zst
RESULTS=${OUT:-$ROOT/benchmarks/gpu/results}
TARGETS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu) MODE=cpu ;;
    --vulkan) MODE=vulkan ;;
    --bundle) BUNDLE=$2; shift ;;
    --out) RESULTS=$2; shift ;;
    --targets) TARGETS=$2; shift ;;
    *) echo "usage: $0 [--cpu | --vulkan] [--bundle FILE] [--out DIR] [--targets T]" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$TARGETS" ]; then
  case "$MODE" in cpu) TARGETS=cpu ;; vulkan) TARGETS=vulkan-llvmpipe ;; *) TARGETS=sm_80 ;; esac
fi
DEVICE_ARGS=()
[ "$MODE" = vulkan ] && DEVICE_ARGS=(--device vulkan)
mkdir -p "$RESULTS"
RESULTS=$(cd "$RESULTS" && pwd)
# What this run writes under $RESULTS; none of an earlier run's is taken for its own.
OUTPUTS=(device.txt results.md results.json measured.tar.zst ordering.md ordering-async.md summary.md)
for f in "${OUTPUTS[@]}" results.tar.gz; do rm -f "$RESULTS/$f"; done
# Everything written, packed into results.tar.gz however the script ends.
pack_results() {
  local have=() f
  for f in "${OUTPUTS[@]}"; do [ -f "$RESULTS/$f" ] && have+=("$f"); done
  [ ${#have[@]} -gt 0 ] || return 0
  (cd "$RESULTS" && "$PY" -c 'import os, sys, tarfile
with tarfile.open("results.tar.gz.part", "w:gz") as tar:
    for name in sys.argv[1:]:
        tar.add(name)
os.replace("results.tar.gz.part", "results.tar.gz")' "${have[@]}") \
    && echo "-- packed ${#have[@]} file(s) into $RESULTS/results.tar.gz"
}
trap pack_results EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
[ -f "$BUNDLE" ] || { echo "run.sh: no bundle at $BUNDLE (build it: docs/measuring.md, 'The prepared GPU run')" >&2; exit 2; }
start=$(date +%s)
echo "== boo-build GPU run ($MODE, targets $TARGETS) -> $RESULTS"

# 1. The loader's dependencies: iree-base-runtime, zstandard (and ml_dtypes,
#    which the runtime needs), from the wheels carried in .whl/ when this
#    Python lacks them. pip when present, else unzip (a wheel is a zip).
if ! "$PY" -c "import iree._runtime_libs, zstandard, ml_dtypes" 2>/dev/null; then
  shopt -s nullglob
  wheels=("$ROOT"/.whl/*.whl)
  if [ ${#wheels[@]} -eq 0 ]; then
    echo "run.sh: $PY lacks iree-base-runtime/zstandard/ml_dtypes and .whl/ holds no wheels (docs/measuring.md, 'The prepared GPU run')" >&2
    exit 2
  fi
  SITE=$(mktemp -d /tmp/boo-site.XXXXXX)
  if ! "$PY" -m pip install -q --no-index --no-deps --target "$SITE" "${wheels[@]}"; then
    for w in "${wheels[@]}"; do "$PY" -m zipfile -e "$w" "$SITE" || exit 2; done
  fi
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  echo "-- installed ${#wheels[@]} wheel(s) into $SITE"
fi
# boo_build itself from the working tree, without its dependencies.
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c "import sys, torch, numpy, zstandard; from boo_build.loader.native import runtime_version
print('-- python', sys.version.split()[0], '| torch', torch.__version__, '| cuda', torch.version.cuda,
      '| iree-base-runtime', runtime_version(), '| gpu', torch.cuda.is_available())" || exit 2

# IREE 3.13's CUDA driver dlopens "libcuda.so" only; containers often mount
# just libcuda.so.1. Link it where the dynamic loader will look (its search
# path is read at process start, so this has to happen out here).
if [ "$MODE" = gpu ] && ! "$PY" -c "import ctypes; ctypes.CDLL('libcuda.so')" 2>/dev/null; then
  LIBCUDA=$("$PY" -c "import ctypes
ctypes.CDLL('libcuda.so.1')
print(next(l.split()[-1] for l in open('/proc/self/maps') if '/libcuda.so' in l))" 2>/dev/null)
  if [ -n "$LIBCUDA" ]; then
    LINKS=$(mktemp -d /tmp/boo-libcuda.XXXXXX)
    ln -s "$LIBCUDA" "$LINKS/libcuda.so"
    export LD_LIBRARY_PATH="$LINKS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "-- linked $LINKS/libcuda.so -> $LIBCUDA (IREE loads libcuda.so by that name)"
  fi
fi

# 2. The device, as the driver sees it.
{
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total,clocks.max.sm --format=csv
  fi
  "$PY" -c "from boo_build.loader.devices import discover, libcuda_capabilities, nvidia_smi_capabilities
print('libcuda compute capabilities:', libcuda_capabilities(), '| nvidia-smi:', nvidia_smi_capabilities())
if '$MODE' == 'gpu':  # discovery swallows driver errors: show them here
    from boo_build.loader.native import runtime
    try:
        print('IREE cuda devices:', runtime().get_cached_hal_driver('cuda').query_available_devices())
    except Exception as e:
        print('IREE cuda driver failed:', type(e).__name__, e)
for d in discover(vulkan='$MODE' == 'vulkan'): print(d)"
} > "$RESULTS/device.txt" 2>&1
cat "$RESULTS/device.txt"

# 3. Measure: validate every shipped implementation, time it against torch
#    eager and torch.compile, select, write the new bundle and the tables.
"$PY" -m boo_build.cli measure "$BUNDLE" --out "$RESULTS/measured.tar.zst" --targets "$TARGETS" \
  --report "$RESULTS/results.md" --json "$RESULTS/results.json" \
  --budget "${BUDGET:-150}" --compile-budget "${COMPILE_BUDGET:-60}" > /dev/null
rc_measure=$?
echo "-- measure exited $rc_measure after $(( $(date +%s) - start )) s"

# 4. The loader on the device: stream ordering, output path, staging.
CHECKED=$RESULTS/measured.tar.zst
[ -f "$CHECKED" ] || CHECKED=$BUNDLE
"$PY" "$ROOT/benchmarks/gpu/check_ordering.py" "$CHECKED" --out "$RESULTS/ordering.md" ${DEVICE_ARGS[@]+"${DEVICE_ARGS[@]}"}
rc_order=$?
rc_async=0
if [ "$MODE" = gpu ]; then
  # The same with IREE's stream-ordered allocations left on: outputs then
  # reach torch by a device copy (the loader's fallback path).
  BOO_CUDA_ASYNC_ALLOCATIONS=1 "$PY" "$ROOT/benchmarks/gpu/check_ordering.py" "$CHECKED" \
    --out "$RESULTS/ordering-async.md"
  rc_async=$?
fi

# 5. One summary.
{
  [ -f "$RESULTS/results.md" ] && cat "$RESULTS/results.md"
  [ -f "$RESULTS/ordering.md" ] && cat "$RESULTS/ordering.md"
  [ -f "$RESULTS/ordering-async.md" ] && { echo; echo "With BOO_CUDA_ASYNC_ALLOCATIONS=1:"; cat "$RESULTS/ordering-async.md"; }
  echo
  echo "measure exit $rc_measure, ordering exit $rc_order, async-allocations exit $rc_async;" \
       "$(( $(date +%s) - start )) s in all"
} > "$RESULTS/summary.md"
cat "$RESULTS/summary.md"
for rc in $rc_measure $rc_order $rc_async; do
  [ "$rc" -eq 0 ] || exit "$rc"
done
exit 0
