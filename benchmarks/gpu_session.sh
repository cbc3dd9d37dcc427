#!/usr/bin/env bash
# One call on a lent GPU machine: every GPU figure and the suites on JAX and
# torch. The machine has JAX, torch, numpy and pytest but no Keras and no
# TensorFlow: carry the wheels in .whl (../shared/GPU.md has the
# `pip download` line; benchmarks/README.md says how this was run).
# Results go to a work folder, packed into $OUT/results.tgz after every
# step: only a few files come back from such a call (8, on 2026-11-27), and
# a step cut by the call's time limit leaves what the steps before wrote.
#
# The timings run first and alone, the torch ones first (the first H200
# run, 2026-11-27, lost its torch file); the correctness checks (device
# bits, compiled bits, both suites) then run side by side until DEADLINE
# seconds after the start (default 540), so the call ends within its limit
# with what finished packed. The JAX timings of that first run (gpu, grid,
# ALiBi: every goal met) are not repeated; benchmarks/results/h200/ holds
# them. On an H200 (2026-11-28) the whole call took 441 s: the timings
# 120 s (benchmarks.gpu 48), then the checks side by side until the JAX
# suite ended (305 s; torch's 191 s).
#
#   OUT=/some/folder [DEADLINE=540] bash benchmarks/gpu_session.sh
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

# Timings, alone: issue 52 items 1 and 2.
step gpu_torch 150 python3 -m benchmarks.gpu --backend torch --reps 31 \
  --json "$WORK/gpu_torch.json"
step grid_torch 90 python3 -m benchmarks.grid --backend torch \
  --json "$WORK/grid_torch.json"
step alibi_torch 100 python3 -m benchmarks.alibi --backend torch \
  --shape 8,32,2048,2048 --json "$WORK/alibi_torch.json"
step timestep_torch 120 python3 -m benchmarks.timestep --backend torch \
  --torch-compile --dit-block --json "$WORK/timestep_torch.json"
step timestep_jax 60 python3 -m benchmarks.timestep --backend jax \
  --json "$WORK/timestep_jax.json"

# Correctness, side by side until the deadline (no timing from here on).
left=$(( ${DEADLINE:-540} - SECONDS - 15 ))
left=$(( left < 60 ? 60 : left ))
echo "correctness: $left s left" >> "$WORK/steps.txt"
bits() {  # the same tables on the GPU and the CPU, per backend (item 5)
  for b in jax torch; do
    for d in cuda cpu; do
      timeout 60 python3 -m benchmarks.device_bits --backend "$b" --device "$d" \
        --save "$WORK/bits_${b}_$d.npz" || echo "bits $b $d: exit $?"
    done
  done
  python3 -m benchmarks.device_bits --compare "$WORK"/bits_*.npz
}
pids=()
bits > "$WORK/device_bits.txt" 2>&1 &
pids+=($!)
for setting in default emulate_precision_casts no_fp_fusion; do  # item 4
  TORCHINDUCTOR_COMPILE_THREADS=2 timeout -k 5 "$left" python3 -m \
    benchmarks.compile_bits --setting "$setting" \
    --json "$WORK/compile_bits_$setting.json" > "$WORK/compile_bits_$setting.log" 2>&1 &
  pids+=($!)
done
for b in jax torch; do  # item 3; -v: each outcome as it comes, should time cut it
  KERAS_BACKEND=$b timeout -k 5 "$left" python3 -m pytest tests keras_posenc -q -n 6 \
    -p no:cacheprovider -v -rfEs --tb=short --timeout 120 \
    > "$WORK/pytest_$b.log" 2>&1 &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
for b in jax torch; do
  echo "pytest_$b: $(tail -n 1 "$WORK/pytest_$b.log")" >> "$WORK/steps.txt"
done
echo "total: $SECONDS s" >> "$WORK/steps.txt"
pack
