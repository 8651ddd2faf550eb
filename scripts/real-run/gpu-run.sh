#!/usr/bin/env bash
# On the GPU machine, from the repository root: install the release's wheels (once per machine, from
# the chunks copied to /tmp/w), then run one phase of the real run on the bundle that
# `python -m llm_pd_eks_sizing.realrun.render` wrote to .gpu/realrun (REALRUN_BUNDLE=.gpu/realrun-h100: one
# rendered with --instance-type for the GPU the machine has). What it shows lands in $OUT.
# Phases: pd | agg | mix-pd | mix-cond | mix-prefix-pd | mix-prefix | gate-agg | gate | gate-broken | stop (docs/real-run.md).
set -euo pipefail
phase=${1:?usage: gpu-run.sh pd|agg|mix-pd|mix-cond|mix-prefix-pd|mix-prefix|gate-agg|gate|gate-broken|stop}
here=$(cd "$(dirname "$0")" && pwd)
bash "$here/unpack-wheels.sh"
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 RAY_USAGE_STATS_ENABLED=0
exec python3 "$here/../../llm_pd_eks_sizing/realrun/gpu_main.py" "${REALRUN_BUNDLE:-.gpu/realrun}" "${OUT:-/tmp/out}" "$phase"
