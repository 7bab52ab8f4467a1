"""What a distillation cost, said: both models timed through `predict`'s path, and results.json
(the scores side by side, the student's as a fraction of the teacher's, sizes, the speed)."""

from __future__ import annotations

import math
import time
from typing import Any

import torch
from torch import nn

from bertkit.runs.distill_config import DistillConfig, Transfer
from bertkit.tasks import Task
from bertkit.tasks.base import run_model
from bertkit.training.hardware import resolve_device, resolve_precision


def measure_speed(task: Task, teacher: nn.Module, student: nn.Module, data: Transfer,
                  cfg: DistillConfig) -> dict[str, Any]:
    """Texts/s of both models through `predict`'s path (`run_model`: the task's collate, padded
    batches, eval mode, fp32) on the same dev texts, tokenization excluded; passes alternate
    between the models so that a busy machine slows both alike; the fastest pass counts. Beside
    wall-clock texts/s, texts per CPU second of this process (all its threads): the work each
    model costs, which other jobs on a shared machine change far less than the wall clock."""
    n = min(cfg.speed_texts, len(data.student_dev[0].features)) if data.student_dev else 0
    if n == 0:
        return {"texts": 0}
    batch = cfg.finetune.eval_batch_size
    runs = {"teacher": (teacher, data.teacher_dev[0].features[:n]),
            "student": (student, data.student_dev[0].features[:n])}
    wall = {name: math.inf for name in runs}
    cpu = {name: math.inf for name in runs}
    for model, features in runs.values():  # warm-up: first-call allocations
        run_model(model, features[:batch], task.collate, task.output_keys, batch)
    for _ in range(cfg.speed_repeats):
        for name, (model, features) in runs.items():
            start = (time.perf_counter(), time.process_time())
            run_model(model, features, task.collate, task.output_keys, batch)
            wall[name] = min(wall[name], time.perf_counter() - start[0])
            cpu[name] = min(cpu[name], time.process_time() - start[1])
    return {"texts": n, "batch_size": batch, "threads": torch.get_num_threads(),
            "device": str(next(student.parameters()).device),
            "teacher_texts_per_s": round(n / wall["teacher"], 1),
            "student_texts_per_s": round(n / wall["student"], 1),
            "speedup": round(wall["teacher"] / wall["student"], 2),
            "teacher_texts_per_cpu_s": round(n / cpu["teacher"], 1),
            "student_texts_per_cpu_s": round(n / cpu["student"], 1),
            "cpu_speedup": round(cpu["teacher"] / cpu["student"], 2)}


def parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def summarize(task: Task, cfg: DistillConfig, data: Transfer, *, teacher: nn.Module,
              student: nn.Module, teacher_metrics: dict[str, Any], student_record: dict[str, Any],
              baseline: dict[str, Any] | None, speed: dict[str, Any] | None) -> dict[str, Any]:
    """results.json: the main dev metric of each model, the student's as a fraction of the
    teacher's, sizes, the transfer set and the speed."""
    metric = task.main_metric

    def score(metrics: dict[str, Any] | None) -> float | None:
        value = None if metrics is None else metrics.get(metric)
        return float(value) if isinstance(value, (int, float)) else None

    teacher_score, student_score = score(teacher_metrics), score(student_record)

    def fraction(value: float | None) -> float | None:
        if value is None or not teacher_score:
            return None
        return round(value / teacher_score, 4)

    return {
        "task": task.name, "metric": metric, "teacher": cfg.teacher_dir, "student": cfg.student,
        "teacher_dev": teacher_score, "student_dev": student_score,
        "baseline_dev": score(baseline), "student_fraction_of_teacher": fraction(student_score),
        "baseline_fraction_of_teacher": fraction(score(baseline)),
        "teacher_layers": teacher.config.num_hidden_layers,
        "student_layers": student.config.num_hidden_layers,
        "teacher_parameters": parameters(teacher), "student_parameters": parameters(student),
        "speed": speed,
        "transfer": {"labelled": data.labelled, "unlabelled": data.unlabelled},
        **({"data_note": data.note} if data.note else {}),
        "temperature": cfg.temperature, "alpha": cfg.alpha, "hidden_weight": cfg.hidden_weight,
        "attention_weight": cfg.attention_weight,
        # the student's training and the teacher's cached outputs ran at it (the timing: fp32)
        "precision": resolve_precision(cfg.finetune.train.precision,
                                       resolve_device(cfg.finetune.train.device)),
        "lr": cfg.finetune.train.lr, "epochs": cfg.finetune.epochs,
        "seed": cfg.finetune.train.seed, "steps": student_record.get("steps"),
        "final_loss": student_record.get("final_loss"),
        "teacher_metrics": teacher_metrics,
        "student_metrics": {k: v for k, v in student_record.items() if k != "task"},
        "baseline_metrics": baseline,
    }
