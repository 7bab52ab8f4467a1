"""`bertkit study learning-curve`: the statistics and crossovers on known inputs, a whole tiny
curve through the command (records, report, resume), and its one-line refusals."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.cli.main import main
from bertkit.studies import frozen as lc_frozen
from bertkit.studies.label_curve import Cell, crossover_lines, crossovers, subset_indices, sustained_from
from bertkit.studies.learning_curve import finetune as lc_finetune
from tests.helpers import small_glue

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, minilm_path) -> Path:
    """A randomly initialized 1-layer BERT with MiniLM's vocabulary."""
    from bertkit.config import BertConfig
    from bertkit.model import BertModel
    from bertkit.tokenization import BertTokenizer

    path = tmp_path_factory.mktemp("lc") / "tiny"
    torch.manual_seed(0)
    BertModel(BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=64)).save_pretrained(path)
    BertTokenizer.from_pretrained(minilm_path).save_pretrained(path)
    return path


def test_a_cell_has_the_median_quartiles_mean_and_standard_error_of_its_seeds():
    cell = Cell("m", "frozen", 50, (1.0, 2.0, 3.0, 4.0, 10.0), collapsed=1)
    assert cell.median == 3.0 and cell.iqr == (2.0, 4.0) and cell.mean == 4.0
    assert cell.se == pytest.approx(np.std([1, 2, 3, 4, 10], ddof=1) / math.sqrt(5))
    assert Cell("m", "frozen", 50, (7.0,)).se == 0.0


def test_sustained_from_is_the_first_count_it_holds_at_from_there_on():
    assert sustained_from({50: False, 100: True, 300: True}) == 100
    assert sustained_from({50: True, 100: False, 300: True}) == 300
    assert sustained_from({50: True, 100: True}) == 50
    assert sustained_from({50: True, 100: False}) is None


def cells_of(table: dict[tuple[str, str, int], tuple[float, ...]]) -> dict:
    return {key: Cell(*key, scores) for key, scores in table.items()}


def test_crossovers_on_constructed_curves():
    # fine-tuning below frozen at 50, above from 100; the fine-tuned gain over the twin large
    # at 50 and 100, inside 2 SE at 300; the frozen gain never inside
    cells = cells_of({
        ("m", "finetune", 50): (60, 61, 62), ("m", "frozen", 50): (70, 71, 72),
        ("m", "finetune", 100): (80, 81, 82), ("m", "frozen", 100): (75, 76, 77),
        ("m", "finetune", 300): (85, 86, 87), ("m", "frozen", 300): (78, 79, 80),
        ("m-random", "finetune", 50): (50, 51, 52), ("m-random", "frozen", 50): (55, 55.5, 56),
        ("m-random", "finetune", 100): (60, 61, 62), ("m-random", "frozen", 100): (56, 57, 58),
        ("m-random", "finetune", 300): (80, 86, 92), ("m-random", "frozen", 300): (57, 58, 59)})
    found = crossovers(cells, "m", "m-random")
    assert found.finetune_ahead == 100 and found.ahead_sizes == (50, 100, 300)
    assert found.gain_inside == {"finetune": 300, "frozen": None}
    lines = crossover_lines(found)
    assert "fine-tuning overtakes frozen features at 100 labels" in lines[0]
    assert "falls inside 2 standard errors at 300 labels" in lines[1]
    assert "stays outside 2 standard errors up to 300 labels" in lines[2]
    never = crossovers(cells_of({("m", "finetune", 50): (1, 2), ("m", "frozen", 50): (5, 6)}),
                       "m", "m-random")
    assert never.finetune_ahead is None and never.gain_inside == {}
    assert "no crossover yet" in crossover_lines(never)[0]
    # with the texts apart 90 at 100 labels, fine-tuning (81) is behind the better frozen
    # approach there and overtakes only at 300
    apart = cells_of({**{k: c.scores for k, c in cells.items()},
                      ("m", "frozen-apart", 100): (89, 90, 91), ("m", "frozen-apart", 300): (82, 83, 84)})
    assert crossovers(apart, "m", "m-random").finetune_ahead == 300


def test_subsets_are_nested_and_the_same_for_every_model_at_a_seed():
    small, large = subset_indices(100, 10, 3), subset_indices(100, 30, 3)
    assert list(large[:10]) == list(small) and len(set(large)) == 30
    assert list(subset_indices(100, 10, 4)) != list(small)


def study(tmp_path: Path, data: Path, model: Path, *extra: str) -> int:
    return main(["study", "learning-curve", "sst2", "--data", str(data), "--model",
                 f"tiny={model}", "--sizes", "16,32", "--seeds", "2", "--work",
                 str(tmp_path / "work"), "--max-seq-length", "32", "--lr-grid", "1e-4,1e-3",
                 "--min-steps", "3", *extra])


def test_a_tiny_curve_records_every_run_reports_and_resumes(shared_data, tmp_path, tiny_model,
                                                           monkeypatch, capsys):
    data = small_glue(shared_data, tmp_path / "data", train=64, dev=40)
    assert study(tmp_path, data, tiny_model) == 0
    records = [json.loads(line) for line in (tmp_path / "work" / "runs.jsonl").read_text().splitlines()]
    # frozen: 2 variants x 2 sizes x 2 seeds; fine-tuning: 2 rates + 2 seeds per variant and size
    assert len(records) == 8 + 16
    assert {r["variant"] for r in records} == {"tiny", "tiny-random"}
    reported = [r for r in records if r["approach"] == "finetune" and not r["selection"]]
    assert all(r["lr"] in (1e-4, 1e-3) and "collapsed" in r for r in reported)
    # the selection seed's subset is not a reported one, and the same subset for both variants
    assert {r["seed"] for r in records if r["selection"]} == {100}
    assert not list((tmp_path / "work").glob("runs/*"))  # (fine-tuned folders deleted)

    def no_run(*args, **kwargs):
        raise AssertionError("a recorded run ran again")

    monkeypatch.setattr(lc_finetune, "finetune_run", no_run)
    monkeypatch.setattr("bertkit.studies.learning_curve.study.finetune_run", no_run)
    monkeypatch.setattr(lc_frozen, "frozen_run", no_run)
    capsys.readouterr()
    assert study(tmp_path, data, tiny_model) == 0
    assert "| tiny | fine-tuned |" in capsys.readouterr().out
    assert study(tmp_path, data, tiny_model, "--report", str(tmp_path / "report")) == 0
    page = (tmp_path / "report" / "learning-curve-sst2.md").read_text()
    assert "Crossovers:" in page and "tiny-random" in page
    assert (tmp_path / "report" / "learning-curve-sst2.json").is_file()
    assert (tmp_path / "report" / "learning-curve-sst2.png").is_file()


@pytest.mark.parametrize("args, says", [
    (["--approach", "frozen,linear"], "one or more of finetune, frozen, frozen-apart"),
    (["--approach", "frozen-apart"], "sst2 has one text per example"),
    (["--model", "apart-x=x"], "a name starting with 'apart-' (apart-x)"),
    (["--sizes", "100,50"], "distinct label counts, rising"),
    (["--sizes", "50,x"], "is not a label count"),
    (["--sizes", "all,50"], "'all' last"),
    (["--seeds", "0"], "--seeds must be >= 1"),
    (["--lr-grid", "0"], "--lr-grid: one or more distinct rates > 0"),
    (["--sizes", "500"], "holds 64 training examples"),
    (["--model", "other=x", "--model", "other=y"], "two models named other"),
    (["--dev-examples", "0"], "--dev-examples must be >= 1"),
])
def test_bad_options_are_one_line_before_anything_is_written(shared_data, tmp_path, tiny_model,
                                                             capsys, args, says):
    data = small_glue(shared_data, tmp_path / "data", train=64, dev=40)
    model = [] if "--model" in args else ["--model", str(tiny_model)]
    assert main(["study", "learning-curve", "sst2", "--data", str(data), "--work",
                 str(tmp_path / "work"), *model, *args]) == 1
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "work").exists()


def test_no_model_and_another_recipe_are_refused(shared_data, tmp_path, tiny_model, capsys):
    data = small_glue(shared_data, tmp_path / "data", train=64, dev=40)
    assert main(["study", "learning-curve", "sst2", "--data", str(data)]) == 1
    assert "give --model PATH" in capsys.readouterr().err
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "study.json").write_text(json.dumps({"recipe": {"task": "sst2"}}))
    assert study(tmp_path, data, tiny_model) == 1
    assert "made with other settings" in capsys.readouterr().err


def test_a_regression_curve_records_where_its_head_starts_and_says_it(tmp_path, monkeypatch):
    """The head's starting bias is part of the recipe: passed to every fine-tuning run, kept in
    study.json (runs made under another start are never mixed in), and said by the report."""
    from bertkit.studies.learning_curve import study as lc_study
    from bertkit.studies.learning_curve.plan import Recipe, Run

    recipe = Recipe("stsb", "train.tsv", "dev.tsv")
    assert recipe.settings()["regression_bias"] == "mean"
    seen = {}

    def finetune_cell(cfg, model_dir, task, folder, seed):
        seen["bias"] = cfg.regression_bias
        return {"score": 50.0, "seconds": 1.0}

    monkeypatch.setattr(lc_finetune.pipeline, "finetune_cell", finetune_cell)
    zero = Recipe("stsb", "train.tsv", "dev.tsv", regression_bias="zero")
    lc_finetune.finetune_run(zero, tmp_path, tmp_path / "t.tsv", Run("finetune", "m", 50, 0), 1e-4,
                             tmp_path / "run")
    assert seen["bias"] == "zero"

    lc_study.claim_recipe(tmp_path / "work", zero)
    with pytest.raises(lc_study.BertkitError, match="regression_bias"):
        lc_study.claim_recipe(tmp_path / "work", recipe)
    # a study.json from before the setting: its runs started at zero; an SST-2 study goes on
    for task, accepted in (("stsb", "zero"), ("sst2", "mean")):
        older = {k: v for k, v in Recipe(task, "t", "d").settings().items() if k != "regression_bias"}
        folder = tmp_path / f"older-{task}"
        folder.mkdir()
        (folder / "study.json").write_text(json.dumps({"recipe": older}))
        lc_study.claim_recipe(folder, Recipe(task, "t", "d", regression_bias=accepted))
    with pytest.raises(lc_study.BertkitError, match="regression_bias"):
        lc_study.claim_recipe(tmp_path / "older-stsb", Recipe("stsb", "t", "d"))

    record = {"date": "2026-12-07", "seconds": 1}
    said = lc_study.header_line("stsb", [record], recipe.settings())
    assert "starts at the training labels' mean" in said
    older = {k: v for k, v in recipe.settings().items() if k != "regression_bias"}
    assert "starts at 0" in lc_study.header_line("stsb", [record], older)
    assert "regression head" not in lc_study.header_line("sst2", [record], recipe.settings())
    with pytest.raises(lc_study.BertkitError, match="--regression-bias must be one of"):
        Recipe("stsb", "", "", regression_bias="median")


def test_frozen_apart_compares_the_two_texts_vectors():
    """[u, v, |u - v|, u * v, cos]: the cosine is the last column, 1 for equal vectors and -1
    for opposite ones."""
    u = np.array([[1.0, 0.0], [0.0, 2.0]], dtype=np.float32)
    v = np.array([[1.0, 0.0], [0.0, -1.0]], dtype=np.float32)
    got = lc_frozen.pair_features(u, v)
    assert got.shape == (2, 4 * 2 + 1) and got.dtype == np.float32
    np.testing.assert_allclose(got[1], [0, 2, 0, -1, 0, 3, 0, -2, -1])
    assert got[0, -1] == pytest.approx(1.0)


def test_a_pair_task_curve_with_its_texts_apart(shared_data, tmp_path, tiny_model, capsys):
    """STS-B with the three approaches: the apart features are the two texts' own vectors
    (each encoded alone, as the encoder does for one text), kept beside the joined ones; the
    report names the approach and sets fine-tuning against the better frozen one."""
    from bertkit.inference.encoder import Encoder
    from bertkit.tasks import get_task

    data = small_glue(shared_data, tmp_path / "data", task="STS-B", train=40, dev=24)
    work = tmp_path / "work"
    assert main(["study", "learning-curve", "stsb", "--data", str(data), "--model",
                 f"tiny={tiny_model}", "--sizes", "16,32", "--seeds", "2", "--work", str(work),
                 "--max-seq-length", "32", "--lr-grid", "1e-3", "--min-steps", "2",
                 "--approach", "finetune,frozen,frozen-apart"]) == 0
    records = [json.loads(line) for line in (work / "runs.jsonl").read_text().splitlines()]
    apart = [r for r in records if r["approach"] == "frozen-apart"]
    assert len(apart) == 2 * 2 * 2 and all("alpha" in r for r in apart)
    with np.load(work / "features" / "tiny-T32-apart" / "dev.npz") as saved:
        vectors = saved["vectors"]
    dev = get_task("stsb").read(data / "glue" / "STS-B" / "dev.tsv")
    encoder = Encoder(tiny_model, precision="fp32", max_length=32)
    u = encoder.encode([dev[0].text_a], pooling="mean", batch_invariant=True)
    v = encoder.encode([dev[0].text_b], pooling="mean", batch_invariant=True)
    np.testing.assert_allclose(vectors[0], lc_frozen.pair_features(u, v)[0], atol=1e-5)
    capsys.readouterr()
    assert main(["study", "learning-curve", "stsb", "--work", str(work), "--status"]) == 0
    out = capsys.readouterr().out
    assert "| tiny | frozen, texts apart + linear |" in out
    assert "tiny (frozen features, texts apart): the gain over random init" in out
