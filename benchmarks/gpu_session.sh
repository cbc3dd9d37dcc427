#!/usr/bin/env bash
# One call on a lent GPU machine: every GPU figure and the suites on JAX and
# torch. The machine has JAX, torch, numpy and pytest but no Keras and no
# TensorFlow: carry the wheels in .whl (../shared/GPU.md has the
# `pip download` line; benchmarks/README.md says how this was run).
# Results go to a work folder, packed into $OUT/results.tgz after every
# step: only a few files come back from such a call (8, on 2026-11-27), and
# a step cut by the call's time limit leaves what the steps before wrote.
#
# On an H200 (2026-11-27) it took about 530 s: device_bits 46 s, timestep
# and grid 43 s, ALiBi 121 s, the suites 230 s, benchmarks.gpu 68 s; the
# step limits below stop a hung step, not a slow run.
#
#   OUT=/some/folder bash benchmarks/gpu_session.sh
set -u
: "${OUT:?set OUT to the folder the results.tgz goes to}"
cd "$(dirname "$0")/.." || exit 1
WORK=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD XLA_PYTHON_CLIENT_PREALLOCATE=false \
  PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
nvidia-smi > "$WORK/nvidia-smi.txt" 2>&1
python3 -c "import jax, torch; print(jax.devices(), torch.cuda.get_device_name())" \
  > "$WORK/devices.txt" 2>&1

pack() {  # whole or not at all: the call's time limit may cut it
  tar czf "$OUT/.results.tgz" -C "$WORK" . && mv -f "$OUT/.results.tgz" "$OUT/results.tgz"
}
step() {  # name, time limit in seconds, then the command
  local name=$1 limit=$2 began=$SECONDS status=0
  shift 2
  timeout -k 10 "$limit" "$@" > "$WORK/$name.log" 2>&1 || status=$?
  echo "$name: exit $status, $((SECONDS - began)) s" | tee -a "$WORK/steps.txt"
  pack
}

# Exactness: the same tables on the GPU and the CPU, per backend.
for b in jax torch; do
  step "bits_${b}_cuda" 60 python3 -m benchmarks.device_bits --backend "$b" \
    --save "$WORK/bits_${b}_cuda.npz"
  step "bits_${b}_cpu" 60 python3 -m benchmarks.device_bits --backend "$b" \
    --device cpu --save "$WORK/bits_${b}_cpu.npz"
done
step bits_compare 30 python3 -m benchmarks.device_bits --compare "$WORK"/bits_*.npz

# The diffusion, grid and ALiBi goals (issues 38 and 39), at their shapes.
for b in jax torch; do
  step "timestep_$b" 90 python3 -m benchmarks.timestep --backend "$b" \
    --json "$WORK/timestep_$b.json"
  step "grid_$b" 90 python3 -m benchmarks.grid --backend "$b" \
    --json "$WORK/grid_$b.json"
  step "alibi_$b" 120 python3 -m benchmarks.alibi --backend "$b" \
    --shape 8,32,2048,2048 --json "$WORK/alibi_$b.json"
done

# The suites, JAX beside torch (correctness only: no timing runs beside).
pids=()
for b in jax torch; do
  KERAS_BACKEND=$b timeout -k 10 240 python3 -m pytest tests keras_posenc -q -n 7 \
    -p no:cacheprovider -v -rfEs --tb=line > "$WORK/pytest_$b.log" 2>&1 &
  pids+=($!)
done  # -v: each outcome as it comes, should the time limit cut a suite
for i in 0 1; do
  status=0
  wait "${pids[$i]}" || status=$?
  echo "pytest_$([ "$i" = 0 ] && echo jax || echo torch): exit $status" >> "$WORK/steps.txt"
done
tail -n 3 "$WORK"/pytest_*.log >> "$WORK/steps.txt"
pack

# The accelerator benchmark (issue 28's goals) last: the longest.
for b in jax torch; do
  step "gpu_$b" 150 python3 -m benchmarks.gpu --backend "$b" --reps 31 \
    --json "$WORK/gpu_$b.json"
done
