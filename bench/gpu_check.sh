#!/usr/bin/env bash
# GPU checks in under 5 minutes on a machine with CUDA GPUs and the project's venv (`make setup`
# with a CUDA build of torch): DDP on nccl, XGBoost with device=cuda, a GPU predictor.
# Prints one PASS/FAIL line per check; exits non-zero if any failed.
#
#   bench/gpu_check.sh            # PY=.venv/bin/python
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
failed=0
if "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "PASS cuda: $("$PY" -c 'import torch; print(torch.cuda.device_count(), torch.cuda.get_device_name(0))')"
else
    echo "FAIL cuda: torch sees no GPU (a CPU build of torch, or no driver)"
    exit 1
fi
for check in ddp-nccl xgboost-cuda torch-predictor-gpu; do
    # Each in its own process (a GPU context per check) with its own limit, so one hang fails one line.
    log="${TMPDIR:-/tmp}/gpu_check_$check.log"
    line=$(timeout 120 "$PY" bench/gpu_check.py "$check" 2>"$log")
    status=$?
    [ "$status" -eq 0 ] || failed=1
    echo "${line:-FAIL $check: exited with status $status before reporting (124: over 120 s); log: $log}"
done
exit $failed
