"""Named pre-training recipes (`--recipe`): what `small-budget` is (the recipe study's measured
`seq64` variant), and how `bertkit prepare` and `bertkit pretrain` take it: its values as
defaults, the options given winning, the mismatches said."""

from __future__ import annotations

import dataclasses
import json
import logging

import pytest

from bertkit.cli.main import main
from bertkit.data.meta import read_meta
from bertkit.errors import BertkitError
from bertkit.runs.pretrain import PretrainConfig
from bertkit.runs.pretrain_recipes import (
    RECIPES,
    Recipe,
    prepare_settings,
    pretrain_settings,
    recipe_help,
)
from bertkit.studies.pretraining import curve, recipes
from bertkit.tokenization import BertTokenizer

pytestmark = pytest.mark.usefixtures("one_thread")


def test_small_budget_is_the_variant_the_recipe_study_measured():
    base = curve.CurveSettings(corpus=("books.txt",))
    preset = dataclasses.replace(base, budgets_hours=(1.0,),
                                 **curve.recipe_fields("small-budget"))
    assert preset == recipes.variant_settings(base, "seq64", 1.0)
    assert curve.curve_tag(preset) == "small-budget" and curve.curve_tag(base) == ""
    # the user's own settings are neither, and two of them are two curves
    assert curve.curve_tag(dataclasses.replace(base, lr=5e-4)) == "lr0.0005"
    assert curve.curve_tag(dataclasses.replace(preset, batch_size=64)) == \
        "max_seq_length64-batch_size64"
    assert curve.curve_tag(dataclasses.replace(base, model="small")) == "modelsmall"
    # the study always masks at batch time; the commands are told to
    assert RECIPES["small-budget"].settings["dynamic_masking"] is True


def test_each_command_takes_its_own_part_of_a_recipe():
    assert prepare_settings("small-budget") == {"max_seq_length": 64, "objective": "mlm",
                                                "dynamic_masking": True}
    assert pretrain_settings("small-budget") == {"objective": "mlm", "lr": 1e-3,
                                                 "warmup_ratio": 0.02, "batch_size": 128,
                                                 "dropout": 0.0}
    assert prepare_settings("paper") == {} == pretrain_settings("paper")
    with pytest.raises(BertkitError, match="unknown recipe 'cram'"):
        pretrain_settings("cram")
    with pytest.raises(BertkitError, match="no command takes"):
        Recipe({"lr": 1e-3, "max_steps": 10})
    assert "2%% warmup" in recipe_help()  # escaped for argparse


@pytest.fixture(scope="module")
def text(shared_data, tmp_path_factory):
    """Two book excerpts (two documents: the paper's next-sentence pairs need two)."""
    root = tmp_path_factory.mktemp("recipe")
    for name in ("carroll-alice.txt", "austen-pride_and_prejudice.txt"):
        (root / name).write_text((shared_data / "books" / name).read_text(encoding="utf-8")
                                 [:20_000], encoding="utf-8")
    return root


def prepare(text, minilm_path, out, *extra):
    return main(["prepare", str(text), "--tokenizer", str(minilm_path), "--output", str(out),
                 "--no-progress", *extra])


def test_prepare_takes_the_recipes_defaults_and_the_options_given_win(text, minilm_path,
                                                                      tmp_path):
    assert prepare(text, minilm_path, tmp_path / "paper") == 0
    assert prepare(text, minilm_path, tmp_path / "small", "--recipe", "small-budget") == 0
    assert prepare(text, minilm_path, tmp_path / "mixed", "--recipe", "small-budget",
                   "--max-seq-length", "96", "--no-dynamic-masking", "--dupe-factor", "2") == 0
    params = {name: read_meta(tmp_path / name).params for name in ("paper", "small", "mixed")}
    shown = {name: (p["max_seq_length"], p["objective"], p["dynamic_masking"],
                    p["masked_lm_prob"]) for name, p in params.items()}
    assert shown == {"paper": (128, "mlm+nsp", False, 0.15), "small": (64, "mlm", True, 0.15),
                     "mixed": (96, "mlm", False, 0.15)}
    assert params["small"]["dupe_factor"] == 1  # masks drawn at batch time: one copy
    assert params["mixed"]["dupe_factor"] == 2


@pytest.fixture(scope="module")
def shards(text, minilm_path, tmp_path_factory):
    root = tmp_path_factory.mktemp("recipe-shards")
    BertTokenizer.from_pretrained(minilm_path).save_pretrained(root / "vocab")
    assert prepare(text, minilm_path, root / "t64", "--recipe", "small-budget") == 0
    assert prepare(text, minilm_path, root / "t128", "--objective", "mlm") == 0
    return root


def pretrain(data, out, *extra):
    return main(["pretrain", "--data", str(data), "--output", str(out), "--max-steps", "3",
                 "--tokenizer", str(data.parent / "vocab"),
                 "--batch-size", "4", "--log-every", "1", "--precision", "fp32",
                 "--no-progress", *extra])


def run_settings(out):
    saved = json.loads((out / "pretrain_config.json").read_text())
    train = saved["train"]
    return saved["objective"], train["lr"], train["warmup_ratio"], train["warmup_steps"], \
        saved["dropout"], train["batch_size"]


def test_pretrain_takes_the_recipes_defaults_and_the_options_given_win(shards, tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        assert pretrain(shards / "t64", tmp_path / "small", "--model", "tiny",
                        "--recipe", "small-budget") == 0
    assert "measured at T = 64" not in caplog.text
    # --batch-size given (4) wins over the recipe's 128; the rest is the recipe's
    assert run_settings(tmp_path / "small") == ("mlm", 1e-3, 0.02, 10_000, 0.0, 4)
    exported = json.loads((tmp_path / "small" / "model" / "config.json").read_text())
    assert exported["hidden_dropout_prob"] == exported["attention_probs_dropout_prob"] == 0.0
    # a warmup given in steps wins over the recipe's ratio; the paper's run keeps its dropout
    assert pretrain(shards / "t64", tmp_path / "steps", "--model", "tiny", "--recipe",
                    "small-budget", "--warmup-steps", "1", "--lr", "2e-3") == 0
    assert run_settings(tmp_path / "steps") == ("mlm", 2e-3, None, 1, 0.0, 4)
    assert pretrain(shards / "t64", tmp_path / "paper", "--model", "tiny",
                    "--objective", "mlm") == 0
    assert run_settings(tmp_path / "paper") == ("mlm", 1e-4, None, 10_000, None, 4)
    exported = json.loads((tmp_path / "paper" / "model" / "config.json").read_text())
    assert exported["hidden_dropout_prob"] == 0.1


def test_pretrain_says_what_the_recipe_does_not_fit(shards, tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        assert pretrain(shards / "t128", tmp_path / "t128", "--model", "tiny",
                        "--recipe", "small-budget") == 0
    assert "--recipe small-budget is measured at T = 64" in caplog.text
    assert "was prepared at T = 128" in caplog.text
    caplog.clear()
    config = json.loads((tmp_path / "t128" / "model" / "config.json").read_text())
    config["hidden_dropout_prob"] = 0.05
    (tmp_path / "config.json").write_text(json.dumps(config))
    with caplog.at_level(logging.WARNING):
        assert pretrain(shards / "t64", tmp_path / "config", "--config",
                        str(tmp_path / "config.json"), "--recipe", "small-budget") == 0
    assert "its dropout is for a --model preset; the --config model keeps its own" in caplog.text
    exported = json.loads((tmp_path / "config" / "model" / "config.json").read_text())
    assert exported["hidden_dropout_prob"] == 0.05


def test_dropout_is_a_presets_only():
    with pytest.raises(BertkitError, match="--config or --init model carries its own"):
        PretrainConfig(data="x", config_file="config.json", dropout=0.0)
    with pytest.raises(BertkitError, match=r"\[0, 1\)"):
        PretrainConfig(data="x", model="tiny", dropout=1.0)


def test_a_run_begun_before_dropout_was_a_setting_resumes(shards, tmp_path):
    """A pretrain_config.json written before `dropout` existed has no such key: its run
    resumes (the missing key reads as the default, None), where another setting is refused."""
    out = tmp_path / "run"
    assert pretrain(shards / "t64", out, "--model", "tiny", "--objective", "mlm",
                    "--save-every", "2") == 0
    saved = json.loads((out / "pretrain_config.json").read_text())
    del saved["dropout"]
    (out / "pretrain_config.json").write_text(json.dumps(saved))
    assert pretrain(shards / "t64", out, "--model", "tiny", "--objective", "mlm",
                    "--save-every", "2", "--resume") == 0
    assert pretrain(shards / "t64", out, "--model", "tiny", "--objective", "mlm",
                    "--save-every", "2", "--dropout", "0", "--resume") == 1
