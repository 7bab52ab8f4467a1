"""Named pre-training recipes: sets of defaults for `bertkit prepare`, `bertkit pretrain` and
the budget curve (`bertkit study pretrain-curve`), one name for what a measurement chose.

`paper` is the defaults themselves (Devlin et al.: T = 128, MLM + NSP, lr 1e-4, 10k warmup
steps, batch 256, dropout 0.1). `small-budget` is what the recipe study measured paying soonest
on a budget of CPU-hours (docs/reports/pretraining.md, the recipe tables at 0.5 and 1 CPU-hour): the
budget curve's recipe (MLM only, masks drawn at batch time, lr 1e-3 with 2% warmup, batch 128,
no dropout while pre-training: Cramming, RoBERTa, Izsak et al. 2021) at T = 64, the study's
`seq64` variant. Its checkpoint layout is BERT's; only the numbers change.

A recipe is one flat mapping of settings, named as the curve's `CurveSettings` fields; each
command takes the ones it has (`prepare_settings`, `pretrain_settings`), and any option given
on the command line wins over the recipe's value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bertkit.errors import BertkitError

PREPARE_KEYS = ("max_seq_length", "objective", "masked_lm_prob", "dynamic_masking")
PRETRAIN_KEYS = ("objective", "lr", "warmup_ratio", "batch_size", "dropout")


@dataclass(frozen=True)
class Recipe:
    settings: Mapping[str, Any] = field(default_factory=dict)  # what it changes: key -> value
    changes: str = ""  # what it changes from the paper, in words (--help, the docs)

    def __post_init__(self) -> None:
        unknown = set(self.settings) - set(PREPARE_KEYS) - set(PRETRAIN_KEYS)
        if unknown:
            raise BertkitError(f"a recipe sets {', '.join(sorted(unknown))}, which no command "
                               "takes")


RECIPES: dict[str, Recipe] = {
    "paper": Recipe({}, "the paper's recipe (the defaults)"),
    "small-budget": Recipe(
        {"max_seq_length": 64, "objective": "mlm", "dynamic_masking": True, "lr": 1e-3,
         "warmup_ratio": 0.02, "batch_size": 128, "dropout": 0.0},
        "T = 64 (the paper: 128, then 512), MLM only (MLM + NSP), masks drawn at batch time "
        "(5 static copies), lr 1e-3 (1e-4) with 2% warmup (10k steps), batch 128 (256), no "
        "dropout while pre-training (0.1; the export says 0, so fine-tune with --dropout 0.1 "
        "for the paper's): what paid soonest at 0.5-1 CPU-hour (docs/reports/pretraining.md)"),
}


def get_recipe(name: str) -> Recipe:
    if name not in RECIPES:
        raise BertkitError(f"unknown recipe {name!r}; choose from {', '.join(RECIPES)}")
    return RECIPES[name]


def prepare_settings(name: str) -> dict[str, Any]:
    """What the recipe sets among `bertkit prepare`'s options."""
    return {k: v for k, v in get_recipe(name).settings.items() if k in PREPARE_KEYS}


def pretrain_settings(name: str) -> dict[str, Any]:
    """What the recipe sets among `bertkit pretrain`'s options."""
    return {k: v for k, v in get_recipe(name).settings.items() if k in PRETRAIN_KEYS}


def recipe_help(names: Sequence[str] = tuple(RECIPES)) -> str:
    """The recipes in words, for an argparse help (its "%" escaped)."""
    text = "; ".join(f"{name}: {get_recipe(name).changes}" for name in names)
    return text.replace("%", "%%")
