"""The GPU check's dry run (gpu_check/gpu_check.sh --dry-run): every part at toy size on the
CPU, offline, as the GPU machine would run it (its interpreter from $PYTHON, bertkit from the
working tree, no index), so the script is known to work the day a GPU comes. One run, then
each part's figures and verdicts are checked in the report and the JSON."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
PARTS = ("a_tests", "b_bench", "c_pays", "d_ddp")
DATA_REASON = "parts (c) and (d) read ../shared/data (books, SST-2), absent here"


def check_module():
    """gpu_check/check.py, loaded from its file (a script of the checkout, not a package)."""
    spec = importlib.util.spec_from_file_location("gpu_check_check", REPO / "gpu_check" / "check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def has_data() -> bool:
    data = REPO.parent / "shared" / "data"
    return (data / "books").is_dir() and (data / "glue" / "SST-2" / "train.tsv").is_file()


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-check")
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1",
           "TMPDIR": str(tmp_path_factory.mktemp("work"))}
    env.pop("PYTHONPATH", None)  # bertkit must come from the script's own PYTHONPATH=src
    proc = subprocess.run(["bash", "gpu_check/gpu_check.sh", "--dry-run", str(out)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=420)
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    report = (out / "report.md").read_text(encoding="utf-8")
    return proc, results, report, out


pytestmark = pytest.mark.slow


def test_the_dry_run_passes_and_leaves_three_files(dry_run):
    proc, results, report, out = dry_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["log.txt", "report.md", "results.json"]
    assert results["mode"] == "dry-run" and set(results["parts"]) == set(PARTS)
    assert results["env_status"] == "ok"
    data_parts = "ok" if has_data() else "skipped"
    expected = {"a_tests": "ok", "b_bench": "ok", "c_pays": data_parts, "d_ddp": data_parts}
    assert {k: p["status"] for k, p in results["parts"].items()} == expected
    for key, part in results["parts"].items():
        assert part["status"] == "skipped" or 0 < part["cap_s"] and part["seconds"] <= part["cap_s"]
        assert f": {part['status']}, " in report.split(f"({key[0]})")[1].split("\n")[0]
    assert results["total_s"] <= results["total_cap_s"]
    assert report.count("\n## ") == 5  # env + the four parts


def test_the_env_step_reads_the_machine_it_runs_on(dry_run):
    """What bertkit, the benchmark, the check and the tests import at module level is installed
    here, each with its distributions' versions as this machine has them; what it lacks is
    imported lazily, with a fallback or a skip."""
    env = dry_run[1]["env"]
    assert env["missing"] == [] and env["failed_imports"] == []
    module_level = {n for n, i in env["imports"].items() if i["kind"] == "module"}
    assert {"torch", "transformers", "pytest", "numpy"} <= module_level
    assert env["imports"]["torch"]["distributions"] == {"torch": torch.__version__}
    assert set(env["lazy_missing"]) <= set(check_module().OPTIONAL)
    assert env["gpus"] == torch.cuda.device_count() and env["torch"] == torch.__version__
    assert env["torch_at_least_2_11"] is True


def test_a_module_level_import_the_machine_lacks_fails_the_env_step():
    check = check_module()
    record = check.dependency_check({"numpy": "module", "bertkit_no_such_package": "module",
                                     "bertkit_no_such_option": "lazy", "json": "module"})
    assert record["missing"] == ["bertkit_no_such_package"]
    assert record["lazy_missing"] == ["bertkit_no_such_option"]
    assert record["imports"]["numpy"]["installed"] and "json" not in record["imports"]
    verdict = check.env_verdict({**record, "failed_imports": []})
    assert verdict["status"] == "failed" and "bertkit_no_such_package" in verdict["reason"]
    assert check.env_verdict({"missing": [], "failed_imports": []}) == {"status": "ok"}


def test_tests_part_counts_each_test(dry_run):
    _, results, report, _ = dry_run
    part = results["parts"]["a_tests"]
    assert part["status"] == "ok"
    runs = {r["name"]: r for r in part["runs"]}
    outcome = "passed" if torch.cuda.is_available() else "skipped"  # they skip without CUDA
    assert runs["cuda-only"][outcome] == 3
    assert runs["gpu-branch"]["passed"] == 1 and runs["gpu-branch"]["failed"] == 0
    assert "- gpu-branch (tests/training/test_loop.py::test_no_host_sync" in report


def test_bench_part_has_every_row_with_numbers(dry_run):
    _, results, report, _ = dry_run
    part = results["parts"]["b_bench"]
    assert part["status"] == "ok"
    cases = [r["case"] for r in part["results"]]
    assert sum(c.startswith("train() loop") for c in cases) == 2
    assert any(c.startswith("finetune") for c in cases)
    assert any(c.startswith("inference") for c in cases)
    for r in part["results"]:
        for who in ("bertkit", "transformers"):
            rate = next(v for k, v in r[who].items() if k.endswith("_per_s"))
            assert rate > 0 and r[who]["s"] > 0
        assert r["ratio"] > 0
        assert r["case"] in report


def test_pays_part_pretrains_finetunes_both_and_gives_a_verdict(dry_run):
    if not has_data():
        pytest.skip(DATA_REASON)
    _, results, report, _ = dry_run
    part = results["parts"]["c_pays"]
    assert part["status"] == "ok"
    pre = part["pretrain"]
    assert pre["steps"] >= 10 and pre["tokens"] > 0 and 0 <= pre["eval_mlm_acc"] <= 1
    for variant in ("pretrained", "random"):
        scores = part["finetune"][variant]["scores"]
        assert len(scores) == part["sizes"]["seeds"] and all(0 <= s <= 100 for s in scores)
    assert "pre-trained" in part["verdict"] and "random init" in part["verdict"]
    assert part["verdict"] in report


def test_ddp_part_compares_one_and_two_processes(dry_run):
    if not has_data():
        pytest.skip(DATA_REASON)
    part = dry_run[1]["parts"]["d_ddp"]
    assert part["status"] == "ok" and part["backend"] == "gloo"
    assert len(part["losses_one"]) == len(part["losses_two"]) == part["steps"]
    assert part["max_rel_loss_diff"] < 1e-3


def test_a_folder_it_did_not_write_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    proc = subprocess.run(["bash", "gpu_check/gpu_check.sh", "--dry-run", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "not empty" in proc.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
