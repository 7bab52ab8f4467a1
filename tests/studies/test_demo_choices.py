"""The demo's choices, without training: the device-dependent scale (CUDA faked on a CPU), the
per-model lr grid selected on dev (never a collapsed run), the verdicts and the report's
sections (pre-training first, the "bank" probe included)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bertkit.errors import BertkitError
from bertkit.studies import results
from bertkit.studies.demo import finetune as demo_finetune
from bertkit.studies.demo import report as demo_report
from bertkit.studies.demo.config import SCALES, DemoConfig, choose_scale, scale_for_machine
from bertkit.studies.probe import LayerDrift
from bertkit.studies.results import ResultsStore


def test_cpu_keeps_the_small_defaults():
    args, line = choose_scale(DemoConfig(Path(".")), cuda_available=False)
    assert (args.device, args.model, args.pretrain_batch_size, args.pretrain_mb,
            args.dupe_factor) == ("cpu", "tiny", 32, 20.0, 1)
    assert "device cpu (auto)" in line and "overridden" not in line


def test_cuda_scales_model_batch_and_data():
    args, line = choose_scale(DemoConfig(Path(".")), cuda_available=True)
    cuda = SCALES["cuda"]
    assert (args.device, args.model, args.pretrain_batch_size, args.pretrain_mb,
            args.dupe_factor) == ("cuda", "mini", cuda.pretrain_batch_size, cuda.pretrain_mb, 5)
    assert args.budget_minutes == DemoConfig(Path(".")).budget_minutes  # the same minutes
    assert "device cuda (auto)" in line and "mini" in line


def test_options_override_the_device_defaults():
    args, line = choose_scale(DemoConfig(Path("."), model="tiny", pretrain_mb=5.0),
                              cuda_available=True)
    assert (args.model, args.pretrain_mb, args.pretrain_batch_size) == ("tiny", 5.0, 128)
    assert "overridden: --model tiny, --pretrain-mb 5.0" in line
    args, _ = choose_scale(DemoConfig(Path("."), device="cpu"), cuda_available=True)
    assert (args.device, args.model) == ("cpu", "tiny")  # --device cpu on a GPU machine
    with pytest.raises(BertkitError, match="CUDA is not available"):
        choose_scale(DemoConfig(Path("."), device="cuda"), cuda_available=False)


def test_scale_for_machine_asks_torch(monkeypatch, caplog):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with caplog.at_level("INFO"):
        args, _ = scale_for_machine(DemoConfig(Path(".")))
    assert args.model == "mini" and "scale: device cuda" in caplog.text


def test_bad_lr_grid_is_refused():
    with pytest.raises(BertkitError, match="--reference-random-lr"):
        DemoConfig(Path("."), reference_random_lr=(1e-3, 1e-3))
    with pytest.raises(BertkitError, match="--finetune-lr"):
        DemoConfig(Path("."), finetune_lr=())


@pytest.mark.parametrize("option, value, flag", [
    ("dupe_factor", 0, "--dupe-factor"), ("pretrain_batch_size", -4, "--pretrain-batch-size"),
    ("dev_examples", 0, "--dev-examples"), ("max_seq_length", 4, "max_seq_length"),
    ("vocab_size", 0, "vocab_size"), ("pretrain_mb", 0.0, "--pretrain-mb"),
    ("pretrain_lr", -1e-3, "--pretrain-lr"), ("dropout", 1.0, "--dropout")])
def test_impossible_numbers_are_refused_before_anything_runs(option, value, flag):
    with pytest.raises(BertkitError, match=flag):
        DemoConfig(Path("."), **{option: value})


def test_select_lr_never_picks_a_collapsed_run():
    runs = {1e-4: {"score": 50.9, "collapsed": True}, 3e-4: {"score": 50.1},
            1e-3: {"score": 62.0}}
    assert results.select_lr(runs) == 1e-3
    runs[1e-3] = {"score": 70.0, "collapsed": True}
    assert results.select_lr(runs) == 3e-4  # below the collapsed one, still chosen
    assert results.select_lr({1e-4: {"score": 49.0, "collapsed": True},
                                    1e-3: {"score": 50.9, "collapsed": True}}) == 1e-3


SCORES = {  # (variant, lr) -> dev accuracy of seed s: score + s; 1e-4 random collapses
    ("pretrained", 1e-3): 66.0, ("random", 1e-3): 70.0, ("minilm", 1e-4): 78.0,
    ("minilm-random", 1e-4): 50.9, ("minilm-random", 3e-4): 58.0, ("minilm-random", 1e-3): 61.0,
}


def fake_finetune(calls, epochs):
    def finetune_cell(recipe, model_dir, task, out_dir, seed):
        variant, lr = Path(model_dir).name, recipe.train.lr
        calls.append((variant, lr, seed))
        epochs.append((variant, recipe.epochs))
        collapsed = variant == "minilm-random" and (lr == 1e-4 or (lr == 1e-3 and seed == 0))
        score = SCORES[(variant, lr)] + seed
        return {"lr": lr, "score": score, **({"collapsed": True, "collapse_reason":
                                             "every prediction is '1'"} if collapsed else {})}
    return finetune_cell


def test_each_model_runs_at_its_own_selected_lr(tmp_path, monkeypatch):
    calls, epochs = [], []
    monkeypatch.setattr(demo_finetune.pipeline, "finetune_cell", fake_finetune(calls, epochs))
    args = DemoConfig(tmp_path, seeds=2, reference_random_lr=(1e-4, 3e-4, 1e-3), no_progress=True)
    store = ResultsStore(tmp_path / "results.json", {})
    models = {v: tmp_path / v for v in ("pretrained", "random", "minilm", "minilm-random")}
    demo_finetune.finetune_section(args, store, models, {}, tmp_path)
    # The random MiniLM copy: seed 0 at every rate; 1e-3 scored best but collapsed, so 3e-4.
    assert [c for c in calls if c[0] == "minilm-random"] == [
        ("minilm-random", 1e-4, 0), ("minilm-random", 3e-4, 0), ("minilm-random", 1e-3, 0),
        ("minilm-random", 3e-4, 1)]
    assert store.scores("minilm-random", "sst2") == [58.0, 59.0]
    assert store.scores("minilm", "sst2") == [78.0, 79.0]  # a one-rate grid: just the seeds
    assert len(calls) == 2 + 2 + 2 + 4
    demo_finetune.finetune_section(args, store, models, {}, tmp_path)  # a rerun runs nothing
    assert len(calls) == 10
    rows, verdicts = demo_finetune.sst2_lines(store, args)
    assert "| MiniLM architecture, random init | 0.0003 | 58.0 | 59.0 | 58.5 ± 0.7 |" in rows
    assert "pre-training did NOT help" in verdicts[0] and "+20.0 points" in verdicts[1]
    table = "\n".join(demo_finetune.selection_lines(store, args))
    assert "| MiniLM architecture, random init | 0.001 | 61.0 | yes: every prediction" in table
    assert "| 0.0003 | 58.0 | no | **selected** |" in table and "Every rate" not in table
    assert dict(epochs) == {"pretrained": 3.0, "random": 3.0, "minilm": 1.0, "minilm-random": 3.0}
    assert "lr {0.0001, 0.0003, 0.001}, 3 epoch(s) for its random-init copy" in \
        demo_finetune.recipe_text(args)


def test_a_collapsed_baseline_makes_the_verdict_cautious(tmp_path):
    store = ResultsStore(tmp_path / "results.json", {})
    for seed, (pre, rnd) in enumerate([(78.0, 50.9), (79.0, 61.0)]):
        store.put(store.key("minilm", "sst2", seed), {"score": pre})
        store.put(store.key("minilm-random", "sst2", seed),
                  {"score": rnd, "collapsed": rnd < 51})
    text = demo_finetune.verdict(store, "minilm", "minilm-random", "MiniLM")
    assert "1 of 2 random-init runs collapsed" in text and "overstated" in text
    args = DemoConfig(tmp_path, seeds=2, reference_random_lr=(1e-4, 1e-3))
    for lr, score in ((1e-4, 50.9), (1e-3, 49.1)):
        store.put(store.key(demo_finetune.grid_name("minilm-random", lr), "sst2", 0),
                  {"score": score, "collapsed": True, "collapse_reason": "every prediction is '1'"})
    assert demo_finetune.selected_lr(store, args, "minilm-random") == 1e-4
    table = "\n".join(demo_finetune.selection_lines(store, args))
    assert "Every rate of the grid of MiniLM architecture, random init collapsed" in table


def test_sst2_table_columns_follow_the_seed_numbers(tmp_path):
    """Seed 10 is not shown under "seed 2" (store keys sort as text), and the seeds of an
    earlier, larger --seeds get their own columns instead of overflowing the header."""
    store = ResultsStore(tmp_path / "results.json", {})
    for s in range(12):
        for v in ("pretrained", "random"):
            store.put(store.key(v, "sst2", s), {"score": 60.0 + s})
    for seeds in (12, 3):
        rows, _ = demo_finetune.sst2_lines(store, DemoConfig(tmp_path, seeds=seeds))
        header, row = rows[0].split(" | "), rows[2].split(" | ")
        assert len(header) == len(row) == 15 and header[4] == "seed 2" and row[4] == "62.0"
        assert header[12] == "seed 10" and row[12] == "70.0"
    store.put(store.key("random", "sst2", 12), {"score": 50.0, "collapsed": True})
    rows, _ = demo_finetune.sst2_lines(store, DemoConfig(tmp_path, seeds=3))
    assert rows[2].split(" | ")[14] == "—" and rows[3].split(" | ")[14] == "50.0*"


def test_report_sections(tmp_path):
    learned = demo_report.Learned([("a [MASK] b.", [(",", 0.2), ("the", 0.1)]),
                                   ("c [MASK] d.", [(",", 0.3), ("of", 0.1)])],
                                  "A.", [("real next", "B.", 0.8), ("random", "C.", 0.1)])
    text = "\n".join(demo_report.learned_lines(learned))
    assert "unigram plateau" in text and "P(IsNext) = 0.80" in text
    learned.fill_mask[1] = ("c [MASK] d.", [("door", 0.3)])
    assert "unigram plateau" not in "\n".join(demo_report.learned_lines(learned))
    records = [{"step": 10, "loss": 9.0}, {"step": 20, "eval_mlm_loss": 6.5, "eval_mlm_acc": 0.12,
                                           "eval_nsp_acc": 0.61}]
    held = "\n".join(demo_report.held_out_lines(records, 8000))
    assert "| 20 | 6.500 | 12.0% | 61.0% |" in held and "MLM 0.01%" in held
    rows = [LayerDrift(0, 0.99, 0.5, 0.99), LayerDrift(1, 0.6, 3.0, 0.8)]
    probe = "\n".join(demo_report.probe_lines(rows))
    assert "| embeddings | 0.990 |" in probe and "| layer 1 | 0.600 | 3.000 | 0.800 |" in probe
    assert "skipped" in demo_report.probe_lines(None)[0]
