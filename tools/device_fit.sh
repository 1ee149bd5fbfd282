#!/usr/bin/env bash
# One device call for the cost model's data and stream-K's diagnosis (logs under $OUT):
#   bash tools/device_fit.sh [SHAPES_SECONDS]
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 PYFUSE_BENCH_COMMIT="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
out=${OUT:-/tmp/pyfuse-device-out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,utilization.gpu --format=csv -lms 250 \
  >"$out/power.csv" 2>&1 &
sampler=$!
timeout 150 python3 benchmarks/stream_k.py >"$out/stream_k.log" 2>&1
echo "stream_k: exit $?"; cat "$out/stream_k.log" | tail -45
kill "$sampler" 2>/dev/null
timeout "${1:-380}" python3 benchmarks/gemm_shapes.py --autotune --json "$out/tuned.json" \
  --only llm-prefill ragged small-k-or-n square \
  >"$out/gemm_shapes.log" 2>&1
echo "gemm_shapes --autotune: exit $?"; grep -c "TFLOP" "$out/gemm_shapes.log"; tail -12 "$out/gemm_shapes.log"
