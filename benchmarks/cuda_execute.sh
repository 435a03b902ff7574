#!/usr/bin/env bash
# The CUDA path of issue 7 on one GPU: calibrate from this GPU's kernels, execute a replay with real kernels,
# and compare modelled and executed step time with and without the measured profile.
#   bash benchmarks/cuda_execute.sh OUTDIR
# (rltrace and torch with CUDA installed; docs/execute.md has the figures this printed on an H100 and an H200.)
set -euo pipefail
out=${1:-/tmp/rltrace_cuda}
mkdir -p "$out"
# The catalog GPU the replay prices: the one the calibration measures (H100 or H200), unless GPU is set.
gpu=${GPU:-$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -o -E 'H100|H200|A100|B200' || echo H100)}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
rltrace calibrate --device cuda --model Qwen2.5-7B -o "$out/profile.parquet" --kernels-out "$out/kernels.parquet"
common=(rollpacker_qwen7b -s disagg-sync --gpu "$gpu" --steps 3 --execute --device cuda --ranks 1 --layers 4)
runs=$(mktemp -d)
rltrace replay "${common[@]}" -o "$runs/roofline"
rltrace replay "${common[@]}" --set cost.profile="$out/profile.parquet" -o "$runs/profiled"
for run in roofline profiled; do  # flat copies: the execution tables and metrics of both runs
  cp "$runs/$run/disagg-sync/execution.parquet" "$out/${run}_execution.parquet"
  cp "$runs/$run/disagg-sync/metrics.json" "$out/${run}_metrics.json"
done
