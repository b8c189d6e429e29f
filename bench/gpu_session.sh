#!/usr/bin/env bash
# The GPU checks of docs/scaling.md ("Measured on a GPU") in one command, for a machine lent for minutes:
# the device, pytest -m gpu, bench/gpu_step.py (8B-shaped step and diagnostics memory against the plan) and
# bench/gpu_cell.py (a Static-IV and a DIR-R cell end to end on an 8B-shaped model folder). Each part has its
# own time limit so a hang in one still leaves the others' logs. Logs and JSON go to $OUT (default gpu-out/).
# Run from the repository root with a CUDA torch: `bash bench/gpu_session.sh`.
set -u
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'transformers', transformers.__version__)"; } 2>&1 | tee "$OUT/device.txt"
timeout "${STEP_LIMIT:-150}" python3 bench/gpu_step.py 2>&1 | grep -v -i warn | tee "$OUT/gpu_step.log"
# the cells run with the settings docs/scaling.md recommends at 7-8B (CELL_HP to change them)
timeout "${CELL_LIMIT:-240}" python3 bench/gpu_cell.py --work "${WORK:-/tmp/gpu-cell}" --json "$OUT/gpu_cell.json" \
  --hp ${CELL_HP:-column_grads=true chunked_loss=true activation_checkpointing=true} 2>&1 | grep -v -i warn | tee "$OUT/gpu_cell.log"
timeout "${TEST_LIMIT:-120}" python3 -m pytest -m gpu tests/integration/test_gpu.py -q -p no:cacheprovider \
  2>&1 | tail -30 | tee "$OUT/pytest_gpu.log"
