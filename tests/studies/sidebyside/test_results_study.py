"""The full-size results study's plan (bertkit.studies.sidebyside.full): what runs next, from the
store alone, so that a stopped study goes on where it stopped."""

import json
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from bertkit.studies.checkout import Checkout
from bertkit.studies.runner import RunLog, busy
from bertkit.studies.sidebyside import full as study
from tests.helpers import held_elsewhere

CHECKOUT = Checkout(Path(__file__).resolve().parents[3])


def run(task, lr, seed, system, score, **extra):
    metric = study.FULL[task]["metrics"][0]
    return {"size": "full", "task": task, "lr": lr, "seed": seed, "system": system,
            "metrics": {metric: score}, "train_examples": 100, **extra}


def test_the_sweep_comes_first_and_its_best_lr_is_the_rows():
    ready, waiting = study.plan([], ["stsb"])
    assert ready == [study.Job("stsb", lr, study.SWEEP_SEED, "bertkit") for lr in study.LR_GRID]
    assert waiting == 6  # 3 bertkit + 3 reference seeds wait on the sweep
    sweep = [run("stsb", lr, study.SWEEP_SEED, "bertkit", s)
             for lr, s in zip(study.LR_GRID, (0.80, 0.85, 0.83))]
    assert study.chosen_lr("stsb", sweep[:2]) is None  # incomplete: no choice yet
    assert study.chosen_lr("stsb", sweep) == 3e-5
    ready, waiting = study.plan(sweep, ["stsb"])
    assert waiting == 0
    assert ready == [study.Job("stsb", 3e-5, seed, system) for seed in range(3)
                     for system in ("bertkit", "transformers")]


def test_finished_runs_are_not_run_again_and_quick_records_are_ignored():
    sweep = [run("sst2", lr, study.SWEEP_SEED, "bertkit", 0.9) for lr in study.LR_GRID]
    assert study.chosen_lr("sst2", sweep) == 2e-5  # a tie goes to the smaller lr
    done = sweep + [run("sst2", 2e-5, 0, "bertkit", 0.9), run("sst2", 2e-5, 0, "transformers", 0.9),
                    {**run("sst2", 2e-5, 1, "bertkit", 0.9), "size": "quick"}]
    ready, _ = study.plan(done, ["sst2"])
    # sst2's reference runs one seed (hours a run): only bertkit's seeds 1 and 2 are left
    assert ready == [study.Job("sst2", 2e-5, 1, "bertkit"), study.Job("sst2", 2e-5, 2, "bertkit")]


def test_a_task_with_more_seeds_runs_them_for_both_systems_after_the_first_three():
    sweep = [run("cola", lr, study.SWEEP_SEED, "bertkit", 0.2) for lr in study.LR_GRID]
    first = [run("cola", 2e-5, s, system, 0.2) for s in range(3)
             for system in ("bertkit", "transformers")]
    ready, _ = study.plan(sweep + first, ["cola"])
    assert study.seeds("cola") == 5
    assert ready == [study.Job("cola", 2e-5, seed, system) for seed in (3, 4)
                     for system in ("bertkit", "transformers")]


def test_the_table_says_whether_the_gap_is_within_the_seed_spread():
    records = [run("rte", lr, study.SWEEP_SEED, "bertkit", 0.6) for lr in study.LR_GRID]
    records += [run("rte", 2e-5, s, "bertkit", v, train_s=10.0, side_by_side=2)
                for s, v in enumerate((0.60, 0.62, 0.64))]
    records += [run("rte", 2e-5, s, "transformers", v, train_s=20.0)
                for s, v in enumerate((0.59, 0.63, 0.66))]
    line = next(x for x in study.full_table(records) if x.startswith("| rte"))
    cells = [c.strip() for c in line.split("|")[1:-1]]
    assert cells[3] == "62.00 ± 2.00 (3)" and cells[4] == "62.67 ± 3.51 (3)"
    assert cells[5] == "-0.67" and cells[6] == "yes"
    assert cells[7].startswith("3 s,") and cells[7].endswith("†")  # 10 s / 3 epochs, shared
    assert not cells[8].endswith("†")
    records = [r if r["system"] != "transformers" else {**r, "metrics": {"accuracy": 0.7}}
               for r in records]
    line = next(x for x in study.full_table(records) if x.startswith("| rte"))
    assert "**no**" in line
    one = [r for r in records if r["system"] == "bertkit" or r["seed"] == 0]
    cells = [c.strip() for c in next(x for x in study.full_table(one)
                                     if x.startswith("| rte")).split("|")[1:-1]]
    assert cells[4] == "70.00 (1)" and cells[6] == "**no**¹"  # one seed: no spread shown


def test_a_second_metrics_row_points_to_the_sweep_it_did_not_choose_by():
    records = [run("mrpc", lr, study.SWEEP_SEED, "bertkit", v)
               for lr, v in zip(study.LR_GRID, (0.831, 0.849, 0.844))]
    rows = {line.split(" | ")[0]: line.split(" | ") for line in study.full_table(records)[2:]}
    assert rows["| mrpc (f1)"][2] == "2e-05: 83.1, **3e-05: 84.9**, 5e-05: 84.4"
    assert rows["| mrpc (accuracy)"][2] == "as above (by f1)"


def test_a_time_cell_names_the_threads_of_runs_given_more_than_one():
    one = run("squad1", 3e-5, 0, "bertkit", 0.8, train_s=600.0, threads=1)
    two = {**one, "seed": 1, "threads": 2}
    assert study._speed([one]) == "300 s, 0.3/s"  # 100 examples, 2 epochs, 600 s
    assert study._speed([two]) == "300 s, 0.3/s (2 threads)"
    assert study._speed([one, two]).endswith("(1/2 threads)")


@pytest.mark.parametrize("task", sorted(study.FULL))
def test_every_full_row_names_its_metrics_and_a_published_reference(task):
    spec = study.FULL[task]
    assert spec["metrics"] and 1 <= spec["ref_seeds"] <= study.seeds(task) and spec["published"]


def test_the_docs_full_table_is_the_stores():
    """docs/reports/results.md shows what the committed store holds (`results.py --report --write-doc`
    after the runs): a store committed without its table, or a hand edit, fails here."""
    records = RunLog(CHECKOUT.records / "results_runs.jsonl").read()
    doc = (CHECKOUT.reports / "results.md").read_text(encoding="utf-8")
    shown = doc.split(study.FULL_BEGIN, 1)[1].split(study.FULL_END, 1)[0].strip().splitlines()
    assert shown == study.full_table(records)


class Parts:
    """bertkit's side of one study job, trained in parts: each part's training saves a state
    `steps` further on whose summary holds the seconds of every part so far (as the loop's
    states do), then ends as told (a clean stop, a kill, done)."""

    def __init__(self, results, tmp_path, monkeypatch):
        self.results, self.resumes, self.total = results, [], 0.0
        self.job = study.Job("cola", 3e-5, 0, "bertkit")
        self.args = SimpleNamespace(store=tmp_path / "runs.jsonl", work=tmp_path / "study",
                                    model_dir="unused", data=tmp_path / "data",
                                    side_by_side=2, threads=1)
        self.out = tmp_path / "study" / self.job.name / "run"
        monkeypatch.setattr(results, "run_one", self.run_one)

    def run_one(self, config):
        self.resumes.append(config.train.resume)
        self.train()
        return {"mcc": 0.25, "train_examples": 8, "train_seconds": self.total,
                "train_cpu_seconds": self.total / 2}

    def train(self):
        saved = sorted(int(p.name[5:]) for p in self.out.glob("checkpoints/step-*"))
        step = (saved[-1] if saved else 0) + 2
        self.total += 0.05
        state = self.out / "checkpoints" / f"step-{step}"
        state.mkdir(parents=True)
        (state / "state.pt").write_text("state")
        (state / "summary.json").write_text(json.dumps(
            {"step": step, "train_seconds": self.total, "cpu_seconds": self.total / 2}))
        if self.end is not None:
            raise self.end

    def part(self, end=None):
        self.end = end
        self.results.run_full_job(self.job, self.args)


def test_a_stopped_run_keeps_its_state_and_a_recorded_one_has_every_parts_time(tmp_path,
                                                                             monkeypatch):
    from bertkit.studies.sidebyside import results  # the whole study: only these tests need it
    from bertkit.training.loop import TrainingInterrupted

    run = Parts(results, tmp_path, monkeypatch)
    with pytest.raises(TrainingInterrupted):
        run.part(TrainingInterrupted("SIGTERM: saved at step 2"))
    assert not run.args.store.exists()  # nothing recorded: the next start resumes
    with pytest.raises(KeyboardInterrupt):
        run.part(KeyboardInterrupt())  # as SIGKILL: its state (step 4), nothing else
    run.part()
    assert run.resumes == [False, "auto", "auto"]  # continues its own folder
    [rec] = RunLog(run.args.store).read()
    assert rec["metrics"] == {"mcc": 0.25} and (rec["task"], rec["seed"]) == ("cola", 0)
    # the loop's own seconds, summed over the three parts: nothing the benchmark measures
    assert rec["resumed"] and rec["timed_whole"]
    assert rec["train_s"] == pytest.approx(0.15) and rec["train_cpu_s"] == pytest.approx(0.075)
    assert study._speed([rec]).startswith("0 s (CPU 0 s)")
    assert not run.out.parent.exists()  # recorded: nothing left to resume


def test_a_run_that_fails_is_not_started_again_and_the_study_says_so(tmp_path, monkeypatch,
                                                                     capsys):
    work = tmp_path / "study"
    failing = tmp_path / "fails.py"
    failing.write_text("import sys\nprint('bad data')\nsys.exit(1)\n")
    failed = study.run_study(["rte"], 2, tmp_path / "runs.jsonl", 1, work, script=failing,
                             poll=0.05)
    sweep = [study.Job("rte", lr, study.SWEEP_SEED, "bertkit") for lr in study.LR_GRID]
    # once each (before, the plan started them again for ever), in the order they ended: two
    # run at once, and under load the second may end first
    assert sorted(failed, key=sweep.index) == sweep
    out = capsys.readouterr().out
    assert out.count("FAILED rc=1") == 3 and "3 run(s) failed" in out
    assert "10 runs wait on runs that failed" in out  # the row's runs need the sweep's lr
    assert (tmp_path / "study" / f"{sweep[0].name}.log").read_text() == "bad data\n"


def test_a_job_another_process_runs_is_neither_run_again_nor_counted_out(tmp_path,
                                                                        monkeypatch, capsys):
    work = tmp_path / "study"
    failing = tmp_path / "fails.py"
    failing.write_text("import sys\nsys.exit(1)\n")
    first = study.Job("rte", study.LR_GRID[0], study.SWEEP_SEED, "bertkit")
    with held_elsewhere(study.job_dir(first, work)):  # as a child of a study stopped earlier would
        assert busy(study.job_dir(first, work))
        failed = []
        runner = threading.Thread(target=lambda: failed.extend(study.run_study(
            ["rte"], 2, tmp_path / "runs.jsonl", 1, work, script=failing, poll=0.05)))
        runner.start()
        runner.join(1.0)
        assert runner.is_alive()  # the held job is still to be run: the study waits
    runner.join(10.0)
    assert not busy(study.job_dir(first, work))
    assert failed[-1] == first and len(failed) == 3  # run once the other process let go
    out = capsys.readouterr().out
    starts = [line.split()[1] for line in out.splitlines() if line.endswith("started")]
    assert starts[-1] == f"{first.name}:" and len(starts) == 3


def test_a_job_another_process_runs_is_not_run_twice(tmp_path, monkeypatch, capsys):
    from bertkit.studies.sidebyside import results

    run = Parts(results, tmp_path, monkeypatch)
    with held_elsewhere(study.job_dir(run.job, run.args.work)):
        run.part()
    assert "is running in another process" in capsys.readouterr().out
    assert run.resumes == [] and not run.args.store.exists()


def test_the_status_shows_each_started_run_and_the_step_its_state_is_at(tmp_path, monkeypatch):
    import torch

    from bertkit.studies.sidebyside import results

    work = tmp_path / "study"
    store = tmp_path / "runs.jsonl"
    for lr, score in zip(study.LR_GRID, (0.55, 0.58, 0.54)):  # 3e-5 chosen
        RunLog(store).append(run("rte", lr, study.SWEEP_SEED, "bertkit", score))
    assert results.study_status(["rte"], store, work) == [
        "3 runs recorded; 10 can run now (0 started); 0 wait on a sweep"]
    first, reference = (study.Job("rte", 3e-5, 0, system) for system in ("bertkit", "transformers"))
    out = study.job_dir(first, work) / "run"
    (out / "checkpoints" / "step-50").mkdir(parents=True)
    (out / "checkpoints" / "step-50" / "state.pt").write_text("state")
    (out / "train_config.json").write_text(json.dumps({"max_steps": 234}))
    (out / "metrics.jsonl").write_text('{"step": 50}\n{"step": 60}\n{"st')  # cut by a kill
    study.job_dir(reference, work).mkdir(parents=True)
    torch.save({"step": 78, "run": {"steps": 234}}, study.job_dir(reference, work) / "reference.pt")
    with held_elsewhere(study.job_dir(first, work)):  # its study runs it now
        lines = results.study_status(["rte"], store, work)
    assert lines == ["3 runs recorded; 10 can run now (2 started); 0 wait on a sweep",
                     f"  {first.name}: running, step 60 of 234, state saved at step 50",
                     f"  {reference.name}: stopped, step 78 of 234, state saved at step 78"]


def test_one_run_stopped_says_so_and_how_to_resume_without_a_traceback(monkeypatch, capsys):
    from bertkit.studies.sidebyside import results
    from bertkit.training.loop import TrainingInterrupted

    def stopped(job, args):
        raise TrainingInterrupted(f"interrupted at step 3; saved {job.name}/step-3")

    monkeypatch.setattr(results, "run_full_job", stopped)
    threads = torch.get_num_threads()
    try:
        code = results.main(["--task", "rte", "--lr", "2e-5", "--seed", "0", "--system",
                             "bertkit"], CHECKOUT)
    finally:
        torch.set_num_threads(threads)  # main sets the run's threads: the suite's go back
    assert code == 130  # not 0: the run is not recorded
    out = capsys.readouterr().out
    assert "interrupted at step 3; saved rte-lr2e-05-seed0-bertkit/step-3" in out
    assert "resumes it" in out


def test_the_script_names_its_checkout_and_a_bad_report_target_is_one_line(tmp_path,
                                                                            monkeypatch, capsys):
    """studies/results.py passes the checkout it sits in: its records and its reports; a report
    without the table's markers is one line and exit 2, and is left as it was."""
    from bertkit.studies.checkout import run_script
    from bertkit.studies.sidebyside import results

    script = tmp_path / "studies" / "results.py"
    (tmp_path / "docs" / "reports").mkdir(parents=True)
    doc = tmp_path / "docs" / "reports" / "results.md"
    doc.write_text("no markers\n")
    store = tmp_path / "docs" / "records" / "results_runs.jsonl"
    RunLog(store).append(run("rte", 2e-5, study.SWEEP_SEED, "bertkit", 0.5))
    monkeypatch.setattr(sys, "argv", [str(script), "--report", "--write-doc"])
    with pytest.raises(SystemExit) as end:
        run_script(results.main, str(script))
    assert end.value.code == 2 and doc.read_text() == "no markers\n"
    out, err = capsys.readouterr()
    assert "| rte (accuracy) |" in out  # the checkout's store, not the committed one
    assert err == f"results.py: error: {doc}: no {study.FULL_BEGIN} ... {study.FULL_END} block to fill\n"
