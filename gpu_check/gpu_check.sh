#!/usr/bin/env bash
# The GPU check: what a GPU machine runs first (sized for one H100/H200 lent for 15 minutes of
# device time in all, with no package registry), most valuable evidence first, into DIR:
#   report.md     the figures and a verdict per part
#   results.json  every figure
#   log.txt       every part's output, one after the other
#
#   bash gpu_check/gpu_check.sh DIR             on the GPU machine (9 minutes at most)
#   bash gpu_check/gpu_check.sh --dry-run DIR   every part at toy size on the CPU (the suite runs it)
#
# Parts, each under its own time cap (`timeout`: one slow part cannot eat the rest's time):
#   env  the machine as it says itself (torch.cuda, nvidia-smi) and every distribution the check
#        imports, with its version, as this machine has it (importlib.metadata)
#   (a)  the CUDA-only tests and the GPU-branch tests, on the GPU   (gpu_check/check.py tests)
#   (b)  the real train() loop beside transformers.BertForPreTraining, BERT-base, bf16, T=128 and
#        512 (tokens/s, MFU, peak memory), a fine-tuning and an inference row
#        (benchmarks/bench_gpu.py)
#   (c)  own pre-training pays? pre-train for a fixed wall budget, fine-tune it and random init
#        on SST-2, a few seeds (gpu_check/pays.py; sizes in its SIZES)
#   (d)  1 vs 2 GPUs with NCCL where there are 2, else "skipped: one GPU"
#
# Offline as the machine is: its own interpreter ($PYTHON, default python3) and torch (2.11+),
# bertkit from this working tree (PYTHONPATH=src; nothing is installed, no venv is made),
# PIP_NO_INDEX=1. The data (../shared/data, else a shared/data or .gpu-data folder in the
# checkout: see gpu_check/stage_data.sh) is needed by (c) and (d) only; they skip without it.
# Exit status: 0 when every part passed or was skipped, 1 otherwise (the report is written anyway).
set -uo pipefail
DRY=0
if [ "${1:-}" = "--dry-run" ]; then DRY=1; shift; fi
DIR="${1:-${OUT:-}}"
if [ -z "$DIR" ] || [ $# -gt 1 ]; then
    echo "usage: bash gpu_check/gpu_check.sh [--dry-run] DIR" >&2
    exit 2
fi
# Never write over what this script did not write: DIR is new, empty, or an earlier report.
if [ -d "$DIR" ] && [ -n "$(ls -A "$DIR")" ] && [ ! -f "$DIR/results.json" ]; then
    echo "gpu_check: error: $DIR is not empty and holds no earlier report (results.json);" \
        "give a new or empty folder" >&2
    exit 2
fi
mkdir -p "$DIR" && DIR=$(cd "$DIR" && pwd) || exit 2
if [ -n "${BERTKIT_DATA:-}" ] && [ -d "$BERTKIT_DATA" ]; then
    BERTKIT_DATA=$(cd "$BERTKIT_DATA" && pwd)  # DIR, the data and $PYTHON: from the caller's folder
fi
PY="${PYTHON:-python3}"
case "$PY" in
    /*) ;;
    */*) PY="$PWD/$PY" ;;
esac
cd "$(dirname "$0")/.." || exit 2

# Time caps in seconds. On one GPU: env 25 + (a) 80 + (b) 110 + (c) 325 = 540 s, the 9 minutes
# the 15-minute lease leaves after the machine's start and the transfers; (d) adds 90 s only
# where 2 GPUs exist. Every part ends well inside its cap by the estimates of docs/reports/benchmarks.md.
if [ $DRY = 1 ]; then
    CAP_ENV=60 CAP_A=120 CAP_B=120 CAP_C=150 CAP_D=90 MODE=(--dry-run)
    BENCH=(--device cpu --smoke --precision fp32)
else
    CAP_ENV=25 CAP_A=80 CAP_B=110 CAP_C=325 CAP_D=90 MODE=()
    BENCH=(--shapes base --seqs 128,512)
fi

export PIP_NO_INDEX=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX") || exit 2
trap 'rm -rf "$WORK"' EXIT
LOG="$DIR/log.txt"
rm -f "$DIR/report.md" "$DIR/results.json" "$LOG"
: > "$WORK/parts.tsv"

DATA=""
for d in "${BERTKIT_DATA:-}" ../shared/data shared/data .gpu-data; do
    if [ -n "$d" ] && [ -d "$d/books" ] && [ -f "$d/glue/SST-2/train.tsv" ]; then
        DATA=$(cd "$d" && pwd)
        break
    fi
done

part() {  # part NAME CAP COMMAND...: run under its cap, output appended to the one log
    local name=$1 cap=$2
    shift 2
    local start=$SECONDS
    echo "===== $name (cap $cap s), $(date -u +%H:%M:%SZ)" >> "$LOG"
    timeout -k 10 "$cap" "$@" >> "$LOG" 2>&1
    local rc=$?
    printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - start))" "$cap" >> "$WORK/parts.tsv"
    echo "gpu_check: $name exit $rc, $((SECONDS - start)) s (cap $cap s)"
}
skip() {  # skip NAME REASON: a part that cannot run here, said so in the report
    printf '{"status": "skipped", "reason": "%s"}\n' "$2" > "$WORK/$1.json"
    printf '%s\t0\t0\t0\n' "$1" >> "$WORK/parts.tsv"
}

if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >> "$LOG" 2>&1
fi
part env "$CAP_ENV" "$PY" gpu_check/check.py env --out "$WORK/env.json"
# the inner deadlines end 15 s before the cap, so a part writes its own JSON before `timeout`
part a_tests "$CAP_A" "$PY" gpu_check/check.py tests --out "$WORK/a_tests.json" \
    --deadline-s $((CAP_A - 15)) "${MODE[@]}"
part b_bench "$CAP_B" "$PY" benchmarks/bench_gpu.py "${BENCH[@]}" --cases loop,finetune,inference \
    --json "$WORK/b_bench.json"
if [ -n "$DATA" ]; then
    part c_pays "$CAP_C" "$PY" gpu_check/pays.py --data "$DATA" --work "$WORK/pays" \
        --out "$WORK/c_pays.json" --deadline-s $((CAP_C - 15)) "${MODE[@]}"
    part d_ddp "$CAP_D" "$PY" gpu_check/check.py ddp --work "$WORK/pays" \
        --out "$WORK/d_ddp.json" --deadline-s $((CAP_D - 15)) "${MODE[@]}"
else
    why="no data: none of \$BERTKIT_DATA, ../shared/data, shared/data, .gpu-data has books/ and glue/SST-2/"
    skip c_pays "$why"
    skip d_ddp "$why"
fi
"$PY" gpu_check/check.py report --dir "$DIR" --work "$WORK" "${MODE[@]}"
