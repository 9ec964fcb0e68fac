#!/usr/bin/env bash
# One call on a lent GPU machine: the checks of the bundle `./run cuda-bundle
# .bundle` packed here, within a device call's 600 s. Run from the
# repository root there, with .bundle/kiln-cuda.tar.xz carried along:
#   tools/gpu_checks.sh [BUNDLE]
# Writes into $OUT (or /tmp/gpu-checks): machine.txt (GPU, driver, PyTorch),
# then run-checks.sh's summary.txt, failures.txt, tests.log, examples.log,
# bench.log and the sanitizer logs, each as soon as its stage ends, so a call
# cut off at its limit still returns what ran.
set -u
bundle=${1:-.bundle/kiln-cuda.tar.xz}
out=${OUT:-/tmp/gpu-checks}
mkdir -p "$out"
if [[ ! -f $bundle ]]; then
  echo "gpu_checks: no bundle at $bundle (./run cuda-bundle .bundle, then carry it)" >&2
  exit 1
fi
work=$(mktemp -d)
tar -C "$work" -xJf "$bundle" || exit 1
{ nvidia-smi; python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'; } \
  >"$out/machine.txt" 2>&1
# Stage budgets: tests 90 s (in parallel), examples at most 4 x 60 s, the
# benchmarks 360 s (the CNN groups last), then each sanitizer 45 s.
TEST_TIMEOUT=${TEST_TIMEOUT:-90} EXAMPLE_TIMEOUT=${EXAMPLE_TIMEOUT:-60} BENCH_TIMEOUT=${BENCH_TIMEOUT:-360} \
  SANITIZE_TIMEOUT=${SANITIZE_TIMEOUT:-45} "$work/kiln-cuda/run-checks.sh" "$out"
cat "$out/summary.txt"
