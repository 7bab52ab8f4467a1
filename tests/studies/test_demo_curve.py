"""The demo's small learning curve, reported from constructed results: the lead says where our
own pre-training pays with few labels and where not, or that it does not anywhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from bertkit.errors import BertkitError
from bertkit.studies.demo import curve as demo_curve
from bertkit.studies.demo import report as demo_report
from bertkit.studies.demo.config import DemoConfig
from bertkit.studies.results import ResultsStore

ARGS = DemoConfig(Path("."), seeds=2, curve_seeds=2, curve_sizes=(50, 200), train_examples=2000)


def store_with(tmp_path: Path, scores: dict[tuple[str, str, int], tuple[float, float]]) -> ResultsStore:
    """A store holding curve cells (and step 4's fine-tuning at 2,000 labels) with these scores."""
    store = ResultsStore(tmp_path / "results.json", {})
    for (variant, approach, size), values in scores.items():
        for seed, score in enumerate(values):
            name = (variant if approach == "finetune" and size == ARGS.train_examples
                    else demo_curve.curve_variant(approach, variant, size))
            store.put(store.key(name, "sst2", seed), {"score": score, "collapsed": score == 50.0})
    return store


def test_the_lead_names_the_counts_where_own_pre_training_pays(tmp_path):
    scores = {}
    for n, (pre, rnd) in {50: (70, 60), 200: (72, 71.5), 2000: (80, 79.9)}.items():
        for approach in ("frozen", "finetune"):
            scores[("pretrained", approach, n)] = (pre, pre + 0.5)
            scores[("random", approach, n)] = (rnd, rnd + 0.5)
            scores[("minilm", approach, n)] = (85.0, 86.0)
    scores[("random", "finetune", 50)] = (50.0, 50.0)  # collapsed
    lead, lines = demo_report.label_curve_lines(store_with(tmp_path, scores), ARGS, None)
    assert lead.startswith("Own pre-training pays with few labels")
    assert "frozen features: pays at 50 labels, not at 200, 2,000" in lead
    # (the gain at 50 is over a twin that learned nothing: said)
    assert ("fine-tuned: pays at 50 labels (over a twin that collapsed to one class: 2 of the "
            "twin's 2 seeds at 50), not at 200, 2,000") in lead
    text = "\n".join(lines)
    assert "| pre-trained (MLM + NSP) | frozen features + logistic regression | 70.2 [70.1, 70.4] |" in text
    assert "50.0 ± 0.0, n=2 (2 collapsed)" in text
    assert "| all-MiniLM-L6-v2 (pre-trained at scale) | fine-tuned | 85.5" in text
    assert "| 50 | 200 | 2,000 |" in text


def test_the_lead_says_so_when_it_pays_nowhere(tmp_path):
    scores = {(v, a, n): (60.0, 61.0) for v in ("pretrained", "random") for a in ("frozen", "finetune")
              for n in (50, 200, 2000)}
    lead, _ = demo_report.label_curve_lines(store_with(tmp_path, scores), ARGS, None)
    assert lead.startswith("Own pre-training does not pay at any label count measured")
    assert "frozen features: does not pay at 50, 200, 2,000 labels" in lead


def test_no_curve_and_nothing_measured_lead_with_nothing(tmp_path):
    store = store_with(tmp_path, {})
    assert demo_report.label_curve_lines(store, ARGS, None) == (None, ["(not measured yet)"])
    skipped = DemoConfig(Path("."), no_curve=True)
    assert demo_report.label_curve_lines(store, skipped, None)[0] is None


@pytest.mark.parametrize("sizes", [(200, 50), (0, 50), (50, 2000), (50, 50)])
def test_curve_sizes_must_rise_under_the_subset(sizes):
    with pytest.raises(BertkitError, match="--curve-sizes"):
        DemoConfig(Path("."), curve_sizes=sizes)
