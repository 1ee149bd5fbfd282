#!/usr/bin/env bash
# One call on the lent GPU machine: the GPU tests, the GPU fuzzer and/or the benchmarks,
# logs under $OUT (what comes back: at most 8 files, so folders are packed into one archive).
#
#   bash tools/device_run.sh tests [SECONDS]     pytest -m gpu (a time limit, default 420 s)
#   bash tools/device_run.sh core [SECONDS]      the matmul and lowering-case GPU files only, the
#                                                first step of a short lease (default 100 s)
#   bash tools/device_run.sh fuzz SEED SECONDS [SHRINK]
#                                                the fuzzer's GPU mode for SECONDS, then (with
#                                                SHRINK) SHRINK seconds to shrink each failure
#   bash tools/device_run.sh bench [CASE ...]    benchmarks/run.py (all cases by default; a time
#                                                limit of BENCH_LIMIT seconds, default 560)
#   bash tools/device_run.sh shapes SECONDS [ARG ...]
#                                                benchmarks/gemm_shapes.py ARGs for SECONDS
#   bash tools/device_run.sh rows [SECONDS]      benchmarks/reread_rows.py: each row plan of
#                                                wide normalizations (default 420 s)
#
# Several steps in one call: bash tools/device_run.sh tests 400 && bash tools/device_run.sh ...
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 PYFUSE_BENCH_COMMIT="${PYFUSE_BENCH_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
out=${OUT:-/tmp/pyfuse-device-out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader >>"$out/gpu.txt" 2>&1
# gpu_tests LIMIT NAME [PYTEST ARG ...]: pytest -m gpu under a time limit, its log pytest_NAME.log
gpu_tests() {
  local limit=$1 name=$2
  shift 2
  timeout "$limit" python3 -m pytest -m gpu -q -p no:cacheprovider -rf "$@" >"$out/pytest_$name.log" 2>&1
  echo "pytest -m gpu ($name): exit $?"
  grep -E "passed|skipped|failed|^FAILED|^ERROR" "$out/pytest_$name.log" | tail -40
}
step=${1:-tests}
shift || true
case "$step" in
  tests)
    gpu_tests "${1:-420}" gpu --durations=10
    ;;
  core)
    gpu_tests "${1:-100}" core tests/gpu/test_gpu_matmul.py tests/gpu/test_gpu_correct_lowering.py
    ;;
  fuzz)
    seed=${1:-7}
    seconds=${2:-150}
    shrink=${3:-0}
    minutes=$(python3 -c "print($seconds / 60)")
    shrink_flags=()
    [ "$shrink" -gt 0 ] && shrink_flags=(--shrink --shrink-seconds "$shrink")
    timeout $((seconds + 120 + 3 * shrink)) python3 -m pyfuse.testing.fuzz --gpu --seed "$seed" \
      --minutes "$minutes" --jobs "$(($(nproc) - 2))" --out "$out/fuzz_$seed" "${shrink_flags[@]}" \
      >"$out/fuzz_$seed.log" 2>&1
    echo "fuzz --gpu seed $seed: exit $?"
    tail -45 "$out/fuzz_$seed.log"
    tar -czf "$out/fuzz_$seed.tgz" -C "$out" "fuzz_$seed" 2>/dev/null && rm -rf "${out:?}/fuzz_$seed"
    ;;
  bench)
    timeout "${BENCH_LIMIT:-560}" python3 benchmarks/run.py ${1:+--only "$@"} --json "$out/bench.json" \
      >"$out/bench.log" 2>&1
    echo "benchmarks: exit $?"
    cat "$out/bench.log" | tail -60
    ;;
  shapes)
    limit=${1:-300}
    shift || true
    timeout "$limit" python3 benchmarks/gemm_shapes.py "$@" --json "$out/gemm_shapes.json" \
      >"$out/gemm_shapes.log" 2>&1
    echo "gemm_shapes: exit $?"
    grep -E "geomean|Error|error" "$out/gemm_shapes.log" | tail -30
    ;;
  rows)
    timeout "${1:-420}" python3 benchmarks/reread_rows.py --json "$out/reread_rows.json" \
      >"$out/reread_rows.log" 2>&1
    echo "reread_rows: exit $?"
    tail -45 "$out/reread_rows.log"
    ;;
  *)
    echo "unknown step $step" >&2
    exit 2
    ;;
esac
