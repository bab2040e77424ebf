#!/usr/bin/env bash
# Issue 40's 4-GPU items on the device machine (repository root, $OUT set), one lease, two commands:
#   bash trainer/bench/issue40_4gpu.sh bench
#     full fine-tuning over FSDP2 (Qwen3-4B/8B/14B, seq 8192, fp32 shards) and the largest LoRA at seq 4096
#     (Qwen2.5-72B and Qwen1.5-110B shapes), meta-device init, 4 GPUs
#   bash trainer/bench/issue40_4gpu.sh temporal     (carry .whl and .temporal)
#     the trainer worker under torchrun on 4 GPUs driven by Temporal: a rank SIGKILLed mid-step and an
#     out-of-memory on one rank, each followed by the job's restart and reload (worker_temporal_gpu.py)
# .whl: temporalio 1.35.0, nexus-rpc, cryptography, cffi, pycparser, types-protobuf wheels (cp312 manylinux);
# .temporal/temporal.xz: the temporal CLI (1.9.1, xz -9), which serves `server start-dev`.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/trainer
part=${1:?usage: issue40_4gpu.sh bench|temporal}
exec > >(tee "$OUT/log-$part.txt") 2>&1
date -u
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
nvidia-smi topo -m
python3 -c 'import torch, transformers, peft; print("torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__)'
mkdir -p /tmp/r
case $part in
  bench)
    echo "== full fine-tuning, 4 GPUs"
    python3 trainer/bench/bench_dist.py --gpus 4 --method full --ac 1 --seq 8192 --samples 2 --parallelism fsdp --meta-init \
      --no-compile --models qwen3-4b,qwen3-8b,qwen3-14b --steps 3 --timeout 150 --out /tmp/r/full.json
    cp /tmp/r/full.json "$OUT/full.json"; date -u
    echo "== largest LoRA, 4 GPUs"
    python3 trainer/bench/bench_dist.py --gpus 4 --parallelism fsdp --meta-init --no-compile --models qwen2.5-72b,qwen1.5-110b \
      --seq 4096 --samples 1 --steps 3 --timeout 200 --out /tmp/r/lora-large.json
    cp /tmp/r/lora-large.json "$OUT/lora-large.json"; date -u
    ;;
  temporal)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PYTHONPATH
    python3 -c 'import google.protobuf, temporalio, cryptography; print("protobuf", google.protobuf.__version__, "temporalio", temporalio.__version__)' || exit 1
    python3 -c 'import lzma, shutil; shutil.copyfileobj(lzma.open(".temporal/temporal.xz"), open("/tmp/temporal", "wb"))' && chmod +x /tmp/temporal || exit 1
    echo "== the worker on 4 GPUs driven by Temporal"
    python3 trainer/bench/worker_temporal_gpu.py --temporal /tmp/temporal --nproc 4 --parallelism auto,fsdp --start-timeout 150 \
      --work /tmp/wt --out "$OUT/worker-temporal.json"
    date -u
    ;;
  *) echo "unknown part $part. Fix: bench or temporal"; exit 2 ;;
esac
