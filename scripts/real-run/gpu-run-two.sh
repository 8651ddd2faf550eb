#!/usr/bin/env bash
# On a machine with two GPUs, from the repository root: install the release's wheels (once per
# machine, from the chunks copied to /tmp/w), then run one phase of the two-GPU run on the bundle that
# `python -m llm_pd_eks_sizing.realrun.two_gpu` wrote to .gpu/realrun-two (REALRUN_BUNDLE: another).
# What it shows lands in $OUT. Phases: pd | agg | tp2 | record | stop (docs/real-run.md).
# Exit 0: done; 3: not yet (engines still starting or loads left): run the same command again;
# 1: the application failed (failure-two-<phase>.txt in $OUT); 2: usage.
set -euo pipefail
phase=${1:?usage: gpu-run-two.sh pd|agg|tp2|record|stop}
case "$phase" in
  pd | agg | tp2 | record | stop) ;;
  *)
    echo "gpu-run-two.sh: phase '$phase' is not one of pd agg tp2 record stop" >&2
    exit 2
    ;;
esac
here=$(cd "$(dirname "$0")" && pwd)
bash "$here/unpack-wheels.sh"
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 RAY_USAGE_STATS_ENABLED=0
export REALRUN_COMMAND="${REALRUN_COMMAND:-bash scripts/real-run/gpu-run-two.sh $phase}"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if [ "$phase" != stop ] && [ "$gpus" -ne 2 ]; then
  echo "gpu-run-two.sh: this machine has $gpus GPU(s); the two-GPU run needs exactly 2" >&2
  exit 2
fi
exec python3 "$here/../../llm_pd_eks_sizing/realrun/gpu_two.py" "${REALRUN_BUNDLE:-.gpu/realrun-two}" "${OUT:-/tmp/out}" "$phase"
