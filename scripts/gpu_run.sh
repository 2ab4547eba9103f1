#!/usr/bin/env bash
# The device check of issue 25 §3/§5 (scripts/gpu_run.py): run from the repository root on a machine with torch +
# CUDA; writes $OUT/{run.log,smoke.json,paper_scale.json,paper_scale.md}.  Extra arguments go to gpu_run.py
# (e.g. --skip fp32:256 to save ~45 s; --tiny for a CPU check).
set -euo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" python scripts/gpu_run.py --out "$OUT" "$@" 2>&1 | tee "$OUT/run.log"
