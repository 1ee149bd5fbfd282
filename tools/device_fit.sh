#!/usr/bin/env bash
# One device call (logs under $OUT): the decode linear+bias+gelu benchmark against eager,
# torch.compile and max-autotune; stream-K beside the plain persistent kernel with the
# GPU's clock and power sampled; then gemm_shapes --autotune (the cost model's data) for
# the seconds left of SHAPES_SECONDS.
#   bash tools/device_fit.sh [SHAPES_SECONDS]
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 PYFUSE_BENCH_COMMIT="${PYFUSE_BENCH_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
out=${OUT:-/tmp/pyfuse-device-out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
timeout 200 python3 benchmarks/run.py --only linear_gelu_decode --max-autotune \
  --json "$out/bench.json" >"$out/bench.log" 2>&1
echo "linear_gelu_decode: exit $?"; tail -14 "$out/bench.log"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,utilization.gpu --format=csv -lms 250 \
  >"$out/power.csv" 2>&1 &
sampler=$!
timeout 90 python3 benchmarks/stream_k.py >"$out/stream_k.log" 2>&1
echo "stream_k: exit $?"; cat "$out/stream_k.log"
kill "$sampler" 2>/dev/null
timeout "${1:-240}" python3 benchmarks/gemm_shapes.py --autotune --json "$out/tuned.json" \
  --only llm-prefill ragged small-k-or-n square --shuffle 1 >"$out/gemm_shapes.log" 2>&1
echo "gemm_shapes --autotune: exit $?"; grep -c "TFLOP" "$out/gemm_shapes.log"; tail -5 "$out/gemm_shapes.log"
