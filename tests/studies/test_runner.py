"""The study runner (bertkit.studies.runner): the run log, the lock on a job or sitting, the
scheduler."""

import json
import sys
import threading

import pytest

from bertkit.errors import BertkitError
from bertkit.studies import runner
from tests.helpers import held_elsewhere


def test_the_run_log_keeps_each_record_with_its_date_and_machine(tmp_path):
    log = runner.RunLog(tmp_path / "deep" / "runs.jsonl")
    assert log.read() == []  # none before the first
    log.append({"task": "rte", "score": 0.5})
    log.append({"task": "mrpc", "score": 0.8, "date": "2026-01-01 00:00 UTC"})  # kept as set
    first, second = log.read()
    assert (first["task"], first["score"]) == ("rte", 0.5)
    assert first["machine"]["cores"] >= 1 and first["machine"]["cpu"]
    assert set(first["machine"]["flags"]) <= set(runner.SPEED_FLAGS)
    assert second["date"] == "2026-01-01 00:00 UTC"
    assert runner.machine_name(first).startswith(first["machine"]["cpu"])


def test_a_line_cut_by_a_kill_is_skipped_and_the_next_record_starts_its_own_line(tmp_path,
                                                                              capsys):
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps({"a": 1}) + "\n" + '{"a": 2, "sco')  # killed mid-write
    log = runner.RunLog(path)
    assert log.read() == [{"a": 1}]
    assert "runs.jsonl:2: not a JSON record" in capsys.readouterr().err
    log.append({"a": 3})  # the run again, after the cut line
    log.append({"a": 4})
    assert [r["a"] for r in log.read()] == [1, 3, 4]  # the cut line stays skipped, said again
    assert "runs.jsonl:2:" in capsys.readouterr().err


def _hold_then_remove(folder, ready, go) -> None:
    import shutil

    with runner.hold(folder, "the job"):
        ready.set()
        go.wait(30)
        shutil.rmtree(folder)  # recorded: nothing left to resume


def test_a_job_waiting_for_a_folder_its_holder_removes_takes_it_again(tmp_path):
    import multiprocessing

    folder = tmp_path / "job"
    ctx = multiprocessing.get_context("fork")
    ready, go = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_then_remove, args=(folder, ready, go))
    holder.start()
    assert ready.wait(30)
    threading.Timer(0.5, go.set).start()  # while this process waits for the lock
    with runner.hold(folder, "the job"):
        assert folder.is_dir() and not runner.busy(folder)
    holder.join(30)
    assert not folder.exists()  # empty once let go: removed


def test_a_folder_held_by_another_process_is_busy_and_refused(tmp_path):
    folder = tmp_path / "job"
    assert not runner.busy(folder)  # no folder yet
    with held_elsewhere(folder):
        assert runner.busy(folder)
        with pytest.raises(runner.Busy, match="the job is running in another process"):
            with runner.hold(folder, "the job"):
                pass
    assert not runner.busy(folder)  # let go when its holder ended
    with runner.hold(folder, "the job"):
        (folder / "state").write_text("x")
    assert not runner.busy(folder) and (folder / "state").exists()  # a folder with state stays


def test_try_hold_holds_until_the_stack_closes_and_answers_busy_without_holding(tmp_path):
    import contextlib
    import os

    free, taken = tmp_path / "free", tmp_path / "taken"
    with held_elsewhere(taken), contextlib.ExitStack() as held:
        busy = runner.try_hold(held, runner.hold(taken, "the cell"))
        assert isinstance(busy, runner.Busy) and "the cell is running" in str(busy)
        assert runner.try_hold(held, runner.hold(free, "the job")) is None
        assert f"pid {os.getpid()} " in runner.holder(free)  # this process's, till the end
    assert not runner.busy(free) and not free.exists()  # released, empty: removed

    class Broken(contextlib.AbstractContextManager):
        def __enter__(self):
            raise BertkitError("not a busy claim")

        def __exit__(self, *exc):
            return None

    with contextlib.ExitStack() as held, pytest.raises(BertkitError, match="not a busy claim"):
        runner.try_hold(held, Broken())  # any other error is the caller's, not "busy"


def test_a_job_may_delete_its_folder_while_it_holds_it(tmp_path):
    import shutil

    folder = tmp_path / "job"
    with runner.hold(folder, "the job"):
        shutil.rmtree(folder)  # recorded: nothing left to resume
    with runner.hold(folder, "the job"):  # the same job again starts clean
        assert folder.is_dir()


class Plan:
    """Jobs "a", "b", "c" (the command's exit status is in the name's table); "c" waits on
    "a" having succeeded, as a results row waits on its lr sweep."""

    def __init__(self, tmp_path, codes):
        self.tmp, self.codes, self.done = tmp_path, codes, set()

    def __call__(self):
        self.done |= {j for j in "abc" if (self.tmp / f"{j}.ok").exists()}
        ready = [j for j in "ab" if j not in self.done]
        if "a" in self.done and "c" not in self.done:
            ready.append("c")
        return ready, (0 if "a" in self.done else 1)

    def command(self, job):
        code = self.codes[job]
        touch = f"open(r'{self.tmp / job}.ok', 'w')" if code == 0 else "print('bad data')"
        return [sys.executable, "-c", f"import sys; {touch}; sys.exit({code})"]


class Name(str):
    @property
    def name(self):
        return str(self)


def _run(tmp_path, plan, workers=2):
    return runner.run_jobs(lambda: ([Name(j) for j in plan()[0]], plan()[1]), plan.command,
                           workers=workers, folder=lambda j: tmp_path / "work" / j,
                           log_file=lambda j: tmp_path / "logs" / f"{j}.log", poll=0.02)


def test_the_scheduler_runs_the_plan_until_it_is_empty(tmp_path, capsys):
    plan = Plan(tmp_path, {"a": 0, "b": 0, "c": 0})
    assert _run(tmp_path, plan) == []
    assert plan.done == {"a", "b", "c"}  # "c" once "a" had run: the plan is asked again
    assert "study: complete" in capsys.readouterr().out


def test_a_failed_job_is_not_started_again_and_its_waiters_are_counted(tmp_path, capsys):
    plan = Plan(tmp_path, {"a": 1, "b": 0, "c": 0})
    assert _run(tmp_path, plan) == ["a"]
    out = capsys.readouterr().out
    assert out.count("a: FAILED rc=1") == 1 and "1 run(s) failed" in out
    assert "1 runs wait on runs that failed" in out
    assert (tmp_path / "logs" / "a.log").read_text() == "bad data\n"


def test_a_job_another_process_holds_waits_and_takes_a_workers_place(tmp_path, capsys):
    plan = Plan(tmp_path, {"a": 0, "b": 0, "c": 0})
    failed: list = []
    with held_elsewhere(tmp_path / "work" / "a"):
        thread = threading.Thread(target=lambda: failed.extend(_run(tmp_path, plan, 1)))
        thread.start()
        thread.join(1.0)
        assert thread.is_alive() and plan.done == set()  # one worker, its place taken by "a"
    thread.join(30)
    assert not thread.is_alive() and failed == [] and plan.done == {"a", "b", "c"}


def _look(lock_file, ready) -> None:
    import fcntl
    import time

    with open(lock_file) as f:  # as `busy` (a status, a scheduler's poll) does, for a moment
        fcntl.flock(f, fcntl.LOCK_SH)
        ready.set()
        time.sleep(0.5)


def test_a_job_waits_out_a_look_at_its_lock(tmp_path):
    import multiprocessing

    from bertkit.io import LOCK_FILE

    folder = tmp_path / "job"
    folder.mkdir()
    (folder / LOCK_FILE).write_text("")
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    looker = ctx.Process(target=_look, args=(folder / LOCK_FILE, ready))
    looker.start()
    assert ready.wait(30)
    with runner.hold(folder, "the job"):  # before, a look made the job say "running elsewhere"
        assert folder.is_dir()
    looker.join(30)
