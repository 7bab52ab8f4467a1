#!/usr/bin/env bash
# Everything a GPU machine checks, end to end, into one report:
#   1. the CUDA tests (tests/training/test_cuda.py) and the CPU suite's GPU-branch tests on the GPU
#   2. bench_gpu.py: the real train() loop, a bare step, fine-tuning and inference, BERT-base and
#      large at T=128/512, bf16, beside transformers
#   3. a 2-process NCCL pre-training run when there are 2 GPUs (losses compared with 1 process)
#   4. the demo at its GPU scale
#
#   bash benchmarks/gpu_check.sh [REPORT_DIR]      (default: $OUT when set, else gpu-report/)
#
# Sets up .venv if needed (torch 2.13.0 as on the CPU: the CUDA wheel where the machine has one).
# Each part is logged; a failing part is reported and the next one still runs.
set -uo pipefail
cd "$(dirname "$0")/.."
REPORT="${1:-${OUT:-gpu-report}}"
mkdir -p "$REPORT"
SUMMARY="$REPORT/REPORT.md"
PY=.venv/bin/python
if [ ! -x "$PY" ]; then
    python3 -m venv .venv && $PY -m pip install -q --upgrade pip \
        && $PY -m pip install -q "torch==2.13.0" && $PY -m pip install -q -e ".[test]"
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
{
    echo "# bertkit GPU check, $(date -u +%Y-%m-%dT%H:%MZ)"
    echo
    echo '```'
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
    $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'gpus', torch.cuda.device_count())"
    echo '```'
} > "$SUMMARY"

part() {  # part NAME COMMAND...: run, log to REPORT/NAME.log, record the outcome
    local name=$1; shift
    local start=$SECONDS
    "$@" > "$REPORT/$name.log" 2>&1
    local rc=$?
    echo "- **$name**: $([ $rc -eq 0 ] && echo ok || echo "FAILED (exit $rc)"), $((SECONDS - start)) s" \
        "(log: $name.log)" >> "$SUMMARY"
    tail -n 25 "$REPORT/$name.log" | sed 's/^/    /' >> "$SUMMARY"
}

echo -e "\n## Results\n" >> "$SUMMARY"
part cuda-tests $PY -m pytest -q -p no:cacheprovider tests/training/test_cuda.py
part gpu-branch-tests env BERTKIT_DEVICE_GENERIC=1 $PY -m pytest -q -p no:cacheprovider \
    tests/test_model.py tests/training/test_loop.py tests/training/test_distributed.py
part bench-gpu $PY benchmarks/bench_gpu.py --json "$REPORT/bench_gpu.json"
nccl_check() {  # 1 GPU process vs torchrun 2 (NCCL) at the same global batch: same losses
    local d="$REPORT/nccl"
    rm -rf "$d" && mkdir -p "$d"
    $PY -m bertkit vocab train ../shared/data/books/*.txt --vocab-size 8000 --output "$d/vocab" \
        && $PY -m bertkit prepare ../shared/data/books/*.txt --tokenizer "$d/vocab" \
            --output "$d/shards" --max-seq-length 128 --dupe-factor 1 --workers 8 --no-progress \
        || return 1
    local args=(pretrain --data "$d/shards" --tokenizer "$d/vocab" --model base --max-steps 30
                --batch-size 64 --micro-batch-size 32 --lr 1e-4 --warmup-steps 3 --log-every 1
                --save-every 0 --eval-holdout 0 --precision fp32 --device cuda --no-progress)
    $PY -m bertkit "${args[@]}" --output "$d/one" || return 1
    $PY -m torch.distributed.run --standalone --nproc_per_node 2 -m bertkit "${args[@]}" \
        --output "$d/two" || return 1
    $PY - "$d" <<'PYEOF'
import json, sys
d = sys.argv[1]
def losses(run):
    return [json.loads(x)["loss"] for x in open(f"{d}/{run}/metrics.jsonl") if '"loss"' in x]
one, two = losses("one"), losses("two")
worst = max(abs(a - b) / abs(a) for a, b in zip(one, two))
print(f"1 GPU vs 2 GPUs (NCCL), {len(one)} steps: largest relative loss difference {worst:.2e}")
sys.exit(0 if len(one) == len(two) == 30 and worst < 1e-3 else 1)
PYEOF
}

GPUS=$($PY -c "import torch; print(torch.cuda.device_count())")
if [ "$GPUS" -ge 2 ]; then
    part nccl-2-process nccl_check
else
    echo "- **nccl-2-process**: skipped ($GPUS GPU: needs 2)" >> "$SUMMARY"
fi
part demo-gpu-scale $PY -m bertkit demo --output "$REPORT/demo-report"
echo -e "\nWritten by benchmarks/gpu_check.sh; copy the figures into docs/benchmarks.md." >> "$SUMMARY"
cat "$SUMMARY"
