#!/usr/bin/env bash
# The second device call of a session (logs under $OUT): the decode linear+bias+gelu
# benchmark against eager, torch.compile and max-autotune, then the GPU fuzzer.
#   bash tools/device_check.sh [FUZZ_SEED] [FUZZ_SECONDS]
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 PYFUSE_BENCH_COMMIT="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
out=${OUT:-/tmp/pyfuse-device-out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
timeout 240 python3 benchmarks/run.py --only linear_gelu_decode --max-autotune \
  --json "$out/bench.json" >"$out/bench.log" 2>&1
echo "linear_gelu_decode: exit $?"; tail -25 "$out/bench.log"
seconds=${2:-45}
timeout $((seconds + 90)) python3 -m pyfuse.testing.fuzz --gpu --seed "${1:-1011}" \
  --minutes "$(python3 -c "print($seconds / 60)")" --jobs 14 --out "$out/fuzz" >"$out/fuzz.log" 2>&1
echo "fuzz --gpu: exit $?"; tail -12 "$out/fuzz.log"
tar -czf "$out/fuzz.tgz" -C "$out" fuzz 2>/dev/null && rm -rf "${out:?}/fuzz"
