"""The distillation table (bertkit.studies.sidebyside.distill_table): runs recorded once, the
table's cells."""

import json

import pytest

from bertkit.studies.runner import RunLog
from bertkit.studies.sidebyside import distill_table


def results(seed, student_dev, baseline_dev, student="layers:0,3"):
    return {"task": "mrpc", "student": student, "seed": seed, "metric": "f1",
            "teacher_dev": 0.80, "student_dev": student_dev, "baseline_dev": baseline_dev,
            "student_layers": 2, "student_parameters": 15_600_000,
            "teacher_parameters": 22_700_000, "lr": 3e-5, "epochs": 3.0, "steps": 345,
            "transfer": {"labelled": 3668, "unlabelled": 0},
            "speed": {"cpu_speedup": 2.9, "speedup": 3.0, "teacher_texts_per_cpu_s": 100.0,
                      "threads": 1}}


def test_each_run_is_recorded_once_and_the_row_pairs_seeds(tmp_path):
    for seed, (s, b) in enumerate([(0.78, 0.76), (0.76, 0.75), (0.77, 0.74)]):
        run = tmp_path / "mrpc" / f"layers03-seed{seed}"
        run.mkdir(parents=True)
        (run / "results.json").write_text(json.dumps(results(seed, s, b)))
    log = RunLog(tmp_path / "runs.jsonl")
    assert distill_table.collect(tmp_path, log) == 3
    assert distill_table.collect(tmp_path, log) == 0  # recorded once
    lines = distill_table.table(log.read())
    assert lines[2].startswith("| mrpc (f1) | teacher") and "**80.0**" in lines[2]
    row = lines[3].split(" | ")
    assert row[4] == "77.0 ± 1.0 (3)" and row[5] == "0.963"  # mean, sample std; 77 / 80
    assert row[6] == "75.0 ± 1.0 (3)" and row[7] == "0.938"
    # with - without, seed by seed: +2, +1, +3 -> mean 2, std 1, SE 1/sqrt(3)
    assert row[8] == "+2.0 ± 0.6" and row[9] == "2.90x |"
    assert lines[-1].startswith("Machine: ")


def test_a_pre_trained_student_is_named_by_its_folder_after_the_known_ones(tmp_path):
    log = RunLog(tmp_path / "runs.jsonl")
    log.append(distill_table.record(results(0, 0.7, 0.6, student="/w/pretrain-curve/points/2h")))
    log.append(distill_table.record(results(0, 0.8, 0.7, student="tiny")))
    rows = distill_table.table(log.read())[3:5]
    assert rows[0].startswith("| mrpc | `tiny` (lr 3e-05)")
    assert rows[1].startswith("| mrpc | pre-trained `pretrain-curve/points/2h` (lr 3e-05)")


def test_a_run_with_a_layer_transfer_loss_is_a_row_of_its_own(tmp_path):
    log = RunLog(tmp_path / "runs.jsonl")
    log.append(distill_table.record(results(0, 0.7, 0.6)))
    log.append(distill_table.record({**results(0, 0.75, 0.6), "hidden_weight": 1.0}))
    log.append(distill_table.record({**results(0, 0.76, 0.6), "attention_weight": 0.1}))
    assert [r["key"] for r in log.read()] == ["mrpc/layers:0,3/0", "mrpc/layers:0,3 +hidden 1/0",
                                              "mrpc/layers:0,3 +attention 0.1/0"]
    rows = distill_table.table(log.read())[3:6]
    assert rows[0].startswith("| mrpc | `layers:0,3` (lr 3e-05)")
    assert rows[1].startswith("| mrpc | `layers:0,3 +attention 0.1` (lr 3e-05)")
    assert rows[2].startswith("| mrpc | `layers:0,3 +hidden 1` (lr 3e-05)")


def test_the_plot_is_a_png_and_nothing_without_runs(tmp_path):
    pytest.importorskip("matplotlib")
    log = RunLog(tmp_path / "runs.jsonl")
    log.append(distill_table.record(results(0, 0.7, 0.6)))
    log.append(distill_table.record({**results(0, 0.8, 0.7), "task": "stsb", "metric": "spearman"}))
    png = distill_table.plot(log.read(), tmp_path / "d.png")
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert distill_table.plot([], tmp_path / "none.png") is None


def test_a_bf16_run_is_its_own_group_with_its_own_teacher(tmp_path):
    """A task's bf16 runs (PRECISION=bf16 studies/distill.sh) never share a row, a teacher or a
    key with its fp32 runs; a record written before the field counts as fp32; the machines line
    names the groups each machine ran."""
    log = RunLog(tmp_path / "runs.jsonl")
    old = distill_table.record(results(0, 0.7, 0.6))
    old.pop("precision")
    log.append(old)
    log.append(distill_table.record({**results(0, 0.75, 0.6), "teacher_dev": 0.82,
                                     "precision": "bf16"}))
    assert [r["key"] for r in log.read()] == ["mrpc/layers:0,3/0", "mrpc/layers:0,3/0/bf16"]
    records = log.read()
    lines = distill_table.table(records)
    assert lines[2].startswith("| mrpc (f1) | teacher") and "**80.0**" in lines[2]
    assert lines[3].startswith("| mrpc | `layers:0,3`") and "70.0 (1)" in lines[3]
    assert lines[4].startswith("| mrpc in bf16 (f1) | teacher") and "**82.0**" in lines[4]
    assert lines[5].startswith("| mrpc in bf16 | `layers:0,3`") and "75.0 (1)" in lines[5]
    records[1]["machine"] = {**records[1]["machine"], "cpu": "Another CPU"}
    said = distill_table.table(records)[-1]
    assert said.startswith("Machines: ") and "(mrpc); " in said and "(mrpc in bf16);" in said
