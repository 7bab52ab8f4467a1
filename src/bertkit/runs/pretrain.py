"""Pre-training orchestration: shards + model + objective -> the shared training loop -> export.

Shape legend: B batch, T tokens, P predicted positions, V vocabulary.

Objectives (the paper's ablations, §5.1):
- `mlm+nsp`: masked LM + next-sentence prediction (the paper); shards from `--objective mlm+nsp`.
- `mlm`: masked LM only ("No NSP"); any shards, the sentence label is dropped.
- `sop`: masked LM + ALBERT's sentence-order prediction; shards from `--objective sop`.
- `ltr`: left-to-right LM ("LTR & No NSP"): a causal mask on the same encoder, every next
  token predicted, the unmasked text restored from the shards' labels.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit.checkpoint import load_into, read_state_dict
from bertkit.config import BertConfig
from bertkit.data.collate import DynamicMaskingCollate, collate_pretraining
from bertkit.data.masking import VocabInfo
from bertkit.data.meta import read_meta
from bertkit.data.shards import ShardDataset
from bertkit.errors import BertkitError
from bertkit.heads import BertForMaskedLM, BertForPreTraining, HeadOutput, PreTrainingOutput
from bertkit.io import release_output_dir
from bertkit.tokenization import BertTokenizer
from bertkit.training import distributed
from bertkit.training.loop import TrainConfig, TrainResult, train
from bertkit.training.run_folder import RunFolder
from bertkit.training.state import latest_checkpoint, saved_cost
from bertkit.training.stream import stream_seed

log = logging.getLogger(__name__)

OBJECTIVES = ("mlm+nsp", "mlm", "ltr", "sop")
# Which shard objectives each training objective can read (None: any).
_SHARDS_FOR = {"mlm+nsp": ("mlm+nsp",), "sop": ("sop",), "mlm": None, "ltr": None}
# The objectives with a sentence-pair task: the only ones that build the pooler and the NSP/SOP
# head. The others build what they train and nothing more: under DDP every parameter must get
# a gradient (an untrained head would stop the first all-reduce), without the cost of
# `find_unused_parameters`.
_SENTENCE_TASK = ("mlm+nsp", "sop")


PRETRAIN_MARKER = "pretrain_config.json"  # written first: marks a folder as a pre-training run


def pretrain_train_config(output_dir: str = "", **changes: Any) -> TrainConfig:
    """The loop's settings for pre-training: the paper's recipe (AdamW, lr 1e-4, 10k warmup
    steps then linear decay, weight decay 0.01, clipping 1.0), the one place it is written."""
    recipe = TrainConfig(output_dir=output_dir, max_steps=1000, batch_size=256, lr=1e-4,
                         warmup_steps=10_000, weight_decay=0.01, save_every=1000, keep=2)
    return dataclasses.replace(recipe, **changes)


def capped_warmup(train: TrainConfig) -> TrainConfig:
    """The paper's 10k warmup steps are for 1M steps; a run shorter than its warmup would never
    reach the peak lr, so it warms up for 10% of its steps instead (logged)."""
    if train.warmup_ratio is None and train.max_steps and train.warmup_steps >= train.max_steps:
        capped = train.max_steps // 10
        log.warning("warmup steps %d >= max steps %d: using %d warmup steps (10%%)",
                    train.warmup_steps, train.max_steps, capped)
        return dataclasses.replace(train, warmup_steps=capped)
    return train


@dataclass(frozen=True)
class PretrainConfig:
    """One pre-training run; saved as `OUTPUT/pretrain_config.json` beside the run."""

    data: str | tuple[str, ...]  # a prepared folder, or several read as one dataset
    train: TrainConfig = field(default_factory=pretrain_train_config)
    model: str | None = None  # a preset name ("mini", "base", ...)
    config_file: str | None = None  # a config.json
    init: str | None = None  # continue from a checkpoint (HF layout)
    tokenizer: str | None = None  # for dynamic masking, the vocabulary check and the export
    objective: str = "mlm+nsp"
    eval_data: str | None = None  # held-out shards; else the last `eval_holdout` instances
    eval_holdout: int | None = None  # None: min(2000, 5% of the data)
    eval_batches: int = 20
    phase2_data: str | None = None  # the paper's second phase (longer sequences)
    phase2_steps: int = 0
    dropout: float | None = None  # a preset's dropout (None: the preset's 0.1, the paper's)

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise BertkitError(f"unknown objective {self.objective!r}; expected one of "
                               f"{', '.join(OBJECTIVES)}")
        if sum(x is not None for x in (self.model, self.config_file, self.init)) > 1:
            raise BertkitError("give at most one of --model, --config and --init")
        if self.phase2_data is not None and self.phase2_steps < 1:
            raise BertkitError("--phase2-data needs --phase2-steps >= 1")
        if self.dropout is not None:
            if self.config_file is not None or self.init is not None:
                raise BertkitError("--dropout sets a --model preset's dropout; a --config or "
                                   "--init model carries its own (hidden_dropout_prob, "
                                   "attention_probs_dropout_prob in its config.json)")
            if not 0 <= self.dropout < 1:
                raise BertkitError(f"--dropout must be in [0, 1), got {self.dropout}")


def load_tokenizer(cfg: PretrainConfig):
    """The tokenizer from --tokenizer, else from --init when it carries vocab.txt, else None."""
    for where in (cfg.tokenizer, cfg.init):
        if where is not None and (Path(where) / "vocab.txt").is_file():
            return BertTokenizer.from_pretrained(where)
        if where is not None and where == cfg.tokenizer:
            raise BertkitError(f"{where}: no vocab.txt (expected a tokenizer directory)")
    return None


def open_shards(path: str | os.PathLike | Sequence[str], tokenizer, config: BertConfig
                ) -> ShardDataset:
    """Open prepared shards (one folder, or several read as one dataset), refusing another
    vocabulary, an over-long length or damage."""
    folders = data_folders(path)
    fingerprint = tokenizer.fingerprint() if tokenizer is not None else None
    dataset = ShardDataset(folders, tokenizer_fingerprint=fingerprint,
                           vocab_size=config.vocab_size)
    path = dataset.path  # names the folder, or the folders joined, in messages
    if dataset.max_seq_length > config.max_position_embeddings:
        raise BertkitError(f"{path}: sequences of up to {dataset.max_seq_length} tokens, but the "
                           f"model has max_position_embeddings={config.max_position_embeddings}")
    if len(dataset) == 0:
        raise BertkitError(f"{path}: holds no instances")
    _check_readable(dataset)
    return dataset


def data_folders(data: str | os.PathLike | Sequence[str]) -> list[Path]:
    """`--data`: one prepared folder, or several; each must exist."""
    folders = [Path(data)] if isinstance(data, (str, os.PathLike)) else [Path(d) for d in data]
    for folder in folders:
        if not folder.is_dir():
            raise BertkitError(f"{folder}: shard folder not found (make it with `bertkit prepare`)")
    return folders


def _check_readable(dataset: ShardDataset) -> None:
    """Every shard's files against meta.json (by size, opening none), then the first and last
    instance of the first and last shards, so that damage shows now, with its name."""
    dataset.verify()
    bounds = dataset.cumulative
    for s in sorted({0, len(dataset.shard_names) - 1}):
        try:
            for i in {int(bounds[s]), int(bounds[s + 1]) - 1}:
                item = dataset[i]
                if len(item["input_ids"]) == 0 or item["input_ids"].max() >= _vocab(dataset):
                    raise ValueError(f"instance {i} has no tokens or out-of-vocabulary ids")
        except BertkitError:
            raise  # already says what it is (too many open files, ...)
        except (ValueError, OSError, IndexError, EOFError) as err:
            raise BertkitError(f"{dataset.shard_dirs[s]}: corrupted shard "
                               f"({err}); re-run `bertkit prepare`") from err


def _vocab(dataset: ShardDataset) -> int:
    return dataset.meta.tokenizer.vocab_size


def check_objective(dataset: ShardDataset, objective: str) -> None:
    made_for = dataset.meta.params.get("objective")
    allowed = _SHARDS_FOR[objective]
    if allowed is not None and made_for not in allowed:
        raise BertkitError(f"{dataset.path}: prepared for objective {made_for!r}, which cannot "
                           f"train {objective!r}: pre-train it with --objective {made_for} (or "
                           "the --recipe it was prepared with), or re-run `bertkit prepare "
                           f"--objective {objective}`")


def model_config(cfg: PretrainConfig, vocab_size: int, seq_len: int) -> BertConfig:
    """The architecture: a preset, a config.json or the --init checkpoint's (default: mini)."""
    if cfg.init is not None:
        return BertConfig.load(cfg.init)
    if cfg.config_file is not None:
        return BertConfig.load(cfg.config_file)
    dropout = {} if cfg.dropout is None else {"hidden_dropout_prob": cfg.dropout,
                                              "attention_probs_dropout_prob": cfg.dropout}
    return BertConfig.preset(cfg.model or "mini", vocab_size=vocab_size,
                             max_position_embeddings=max(512, seq_len), **dropout)


def model_class(objective: str) -> type[BertForPreTraining] | type[BertForMaskedLM]:
    """The model an objective trains: MLM + the sentence head for mlm+nsp and sop, the MLM head
    alone (no pooler, as `transformers`' BertForMaskedLM) for mlm and ltr."""
    return BertForPreTraining if objective in _SENTENCE_TASK else BertForMaskedLM


def new_model(objective: str, config: BertConfig) -> BertForPreTraining | BertForMaskedLM:
    """A freshly initialized model for `objective`; `ltr`'s is causal (`BertModel`'s `causal`),
    its batches plain."""
    return model_class(objective)(config, causal=objective == "ltr")


def build_model(cfg: PretrainConfig, config: BertConfig) -> BertForPreTraining | BertForMaskedLM:
    """The run's model: `new_model`, with the --init checkpoint's weights loaded into it."""
    # the initial weights depend on the seed alone: a fresh model's, and with --init the heads
    # the checkpoint lacks (all-MiniLM-L6-v2 has no MLM head)
    torch.manual_seed(cfg.train.seed)
    model = new_model(cfg.objective, config)
    if cfg.init is not None:  # heads the objective does not train are left out
        load_into(model, read_state_dict(cfg.init), str(cfg.init))
    return model


def ltr_targets(batch: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Left-to-right LM: predict token t+1 from tokens ≤ t at every position (on a causal
    model: `build_model`)."""
    ids, mask = batch["input_ids"], batch["attention_mask"]  # (B, T)
    B, T = ids.shape
    return {
        "input_ids": ids,
        "token_type_ids": batch["token_type_ids"],
        "attention_mask": mask,
        "masked_lm_positions": torch.arange(T - 1).expand(B, T - 1),  # (B, T-1)
        "masked_lm_ids": ids[:, 1:],  # (B, T-1)
        "masked_lm_weights": mask[:, 1:].float(),  # (B, T-1): no target past the end
    }


def unmask(item: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The original text of a statically masked instance (the labels hold the originals)."""
    ids = np.array(item["input_ids"], dtype=np.int64)
    ids[item["masked_lm_positions"]] = item["masked_lm_ids"]
    return {**item, "input_ids": ids}


def _pad_batch(items: Sequence[dict[str, np.ndarray]], pad_id: int) -> dict[str, torch.Tensor]:
    T = max(len(it["input_ids"]) for it in items)
    out = {name: torch.zeros(len(items), T, dtype=torch.long)
           for name in ("input_ids", "token_type_ids", "attention_mask")}  # (B, T) each
    out["input_ids"].fill_(pad_id)
    for b, it in enumerate(items):
        n = len(it["input_ids"])
        out["input_ids"][b, :n] = torch.from_numpy(np.asarray(it["input_ids"], dtype=np.int64))
        out["token_type_ids"][b, :n] = torch.from_numpy(
            np.asarray(it["token_type_ids"], dtype=np.int64))
        out["attention_mask"][b, :n] = 1
    return out


class PretrainCollate:
    """Items -> the batch the objective needs. Dynamic masks are a function of each example's
    global stream position (`DynamicMaskingCollate`), which the loop passes: nothing to save
    with the training state, the same masks on any number of processes."""

    wants_positions = True  # the loop calls `collate(items, positions)`

    def __init__(self, objective: str, pad_id: int, dynamic: DynamicMaskingCollate | None):
        self.objective, self.pad_id, self.dynamic = objective, pad_id, dynamic

    def __call__(self, items: Sequence[dict[str, np.ndarray]],
                 positions: Sequence[int]) -> dict[str, Any]:
        if self.objective == "ltr":
            return ltr_targets(_pad_batch([unmask(it) for it in items], self.pad_id))
        if self.dynamic is not None:
            batch = self.dynamic(items, positions)
        else:
            batch = collate_pretraining(items, self.pad_id)
        if self.objective == "mlm":
            batch.pop("next_sentence_label", None)
        elif "next_sentence_label" not in batch:
            raise BertkitError(f"objective {self.objective} needs sentence labels; these shards "
                               "carry none (prepared with --objective mlm)")
        return batch


def make_collate(dataset: ShardDataset, objective: str, tokenizer, seed: int) -> PretrainCollate:
    """Static masks from the shards, or fresh masks per batch when they were prepared dynamic."""
    pad_id = dataset.meta.tokenizer.pad_token_id
    dynamic = None
    if dataset.dynamic_masking and objective != "ltr":
        if tokenizer is None:
            raise BertkitError(f"{dataset.path}: dynamic-masking shards need the vocabulary: "
                               "pass --tokenizer DIR")
        params = dataset.meta.params
        dynamic = DynamicMaskingCollate(
            # Shards prepared before the option existed treated [UNK] as special.
            VocabInfo.from_tokenizer(tokenizer, mask_unk=params.get("mask_unk", False)),
            seed,
            masked_lm_prob=params["masked_lm_prob"],
            max_predictions=params["max_predictions_per_seq"],
            whole_word_mask=params["whole_word_mask"], pad_token_id=pad_id)
    return PretrainCollate(objective, pad_id, dynamic)


def pretraining_metrics(batch: dict[str, Any], out: PreTrainingOutput | HeadOutput
                        ) -> dict[str, torch.Tensor]:
    """Per-batch MLM accuracy (weighted as the loss) and NSP/SOP accuracy, plus both losses
    (0-dim tensors: the loop sums them on the device). `out` is BertForPreTraining's or, for
    the objectives without a sentence task, BertForMaskedLM's (whose loss is the MLM loss)."""
    if isinstance(out, HeadOutput):
        out = PreTrainingOutput(out.loss, out.logits, None, mlm_loss=out.loss)
    metrics: dict[str, torch.Tensor] = {}
    if out.mlm_loss is not None:
        w = batch["masked_lm_weights"].float()  # (B, P)
        hits = (out.mlm_logits.argmax(-1) == batch["masked_lm_ids"]).float()  # (B, P)
        metrics["mlm_loss"] = out.mlm_loss.detach()
        metrics["mlm_acc"] = (hits * w).sum() / w.sum().clamp(min=1)
    if out.nsp_loss is not None:
        nsp_hits = out.nsp_logits.argmax(-1) == batch["next_sentence_label"]  # (B,)
        metrics["nsp_loss"] = out.nsp_loss.detach()
        metrics["nsp_acc"] = nsp_hits.float().mean()
    return metrics


def make_evaluator(dataset, collate_factory: Callable[[], PretrainCollate], batch_size: int,
                   batches: int) -> Callable[[torch.nn.Module], dict[str, float]]:
    """Mean metrics over the first `batches` held-out batches, with the same masks every time
    (a fresh collate from a fixed seed), so successive evaluations are comparable."""

    def evaluate(model: torch.nn.Module) -> dict[str, float]:
        device = next(model.parameters()).device
        collate, sums, count = collate_factory(), {}, 0
        for start in range(0, min(len(dataset), batch_size * batches), batch_size):
            positions = range(start, min(start + batch_size, len(dataset)))
            items = [dataset[i] for i in positions]
            batch = {k: v.to(device) if torch.is_tensor(v) else v
                     for k, v in collate(items, positions).items()}
            out = model(**batch)
            for k, v in {"loss": out.loss, **pretraining_metrics(batch, out)}.items():
                sums[k] = sums.get(k, 0.0) + float(v)
            count += 1
        return {k: v / max(count, 1) for k, v in sums.items()}

    return evaluate


def split_eval(dataset: ShardDataset, holdout: int | None) -> tuple[Any, Any]:
    """Hold out the last documents of the corpus for evaluation: about `holdout` instances (default
    min(2000, 5%)), cut at a chunk start so that no held-out document (nor any of its duplicates
    from --dupe-factor) is also trained on. Data prepared as a single chunk cannot be cut that
    way (nor chunks far larger than the hold-out): then the last instances are held out, with a
    warning that they share documents."""
    n = len(dataset)
    k = default_holdout(n) if holdout is None else holdout
    if k >= n:
        raise BertkitError(f"{dataset.path}: eval holdout {k} leaves no training data ({n})")
    if k <= 0:
        return dataset, None
    cut = document_cut(dataset.meta.chunk_starts, n, k)
    if cut is None:
        log.warning("%s: no chunk boundary near the last %d instances, so the held-out instances "
                    "share documents with training (optimistic eval figures); pass --eval-data, "
                    "or prepare with a smaller --chunk-chars", dataset.path, k)
        cut = n - k
    return (torch.utils.data.Subset(dataset, range(cut)),
            torch.utils.data.Subset(dataset, range(cut, n)))


def document_cut(chunk_starts: Sequence[int], n: int, k: int) -> int | None:
    """The chunk start that leaves nearest to `k` of `n` instances held out, if one leaves
    between k/2 and 3k (else None: the chunks are too coarse for this hold-out)."""
    candidates = [s for s in chunk_starts if 0 < s < n and k / 2 <= n - s <= 3 * k]
    if not candidates:
        return None
    return min(candidates, key=lambda s: (abs(n - s - k), s))


def run_phase(cfg: PretrainConfig, model: BertForPreTraining | BertForMaskedLM, data_dir: str, tokenizer,
              train_cfg: TrainConfig) -> TrainResult:
    """One phase: open and check the shards, hold out eval data, train."""
    dataset = open_shards(data_dir, tokenizer, model.config)
    check_objective(dataset, cfg.objective)
    eval_source = dataset  # whose masking (static/dynamic) the eval batches follow
    if cfg.eval_data is not None:
        eval_source = open_shards(cfg.eval_data, tokenizer, model.config)
        train_set, eval_set = dataset, eval_source
    else:
        train_set, eval_set = split_eval(dataset, cfg.eval_holdout)
    collate = make_collate(dataset, cfg.objective, tokenizer,
                           stream_seed(train_cfg.seed, "masking"))
    evaluate = None
    if eval_set is not None:
        micro = train_cfg.micro_batch_size or train_cfg.batch_size
        evaluate = make_evaluator(
            eval_set, lambda: make_collate(eval_source, cfg.objective, tokenizer, 2**31 - 1),
            micro, cfg.eval_batches)
    return train(model, train_set, collate, train_cfg, evaluate=evaluate,
                 step_metrics=pretraining_metrics)


def default_holdout(n: int) -> int:
    return min(2000, n // 20)


def matched_holdout(cfg: PretrainConfig, config: BertConfig, tokenizer) -> int | None:
    """Phase 1's hold-out when phase 2 reads the same corpus (the same chunks, at another
    length): phase 2's held-out chunks, so that the text phase 2 is evaluated on was never
    trained on in phase 1 (at a longer length the same number of instances covers more text).
    `cfg.eval_holdout` when the chunks differ (another corpus) or do not cut."""
    first = open_shards(cfg.data, tokenizer, config)
    second = open_shards(cfg.phase2_data, tokenizer, config)
    starts1, starts2 = first.meta.chunk_starts, second.meta.chunk_starts
    n1, n2 = len(first), len(second)
    k2 = default_holdout(n2) if cfg.eval_holdout is None else cfg.eval_holdout
    cut = document_cut(starts2, n2, k2) if k2 > 0 else None
    if len(starts1) != len(starts2) or cut is None:
        return cfg.eval_holdout
    return n1 - starts1[starts2.index(cut)]


def phase2_config(train_cfg: TrainConfig, output: Path, steps: int
                  ) -> TrainConfig | None:
    """Phase 2 (Google's recipe: a second run from phase 1's weights, fresh optimizer and
    schedule): its own directory and step budget, warmup scaled to it. A CPU-seconds budget
    stays the run's: phase 2 gets what phase 1 left of it (None when phase 1 spent it all)."""
    warmup = min(train_cfg.resolved_warmup, steps // 10)
    # a checkpoint, not the folder: a kill during phase 2's first save leaves it empty, and
    # phase 1 would be skipped for a phase 2 from a fresh model
    has_state = latest_checkpoint(output / "phase2") is not None
    stop_at = train_cfg.stop_at_cpu_seconds
    if stop_at is not None:
        left = stop_at - saved_cost(output)["cpu_seconds"]
        if left <= 0:
            return None
        stop_at = left
    return dataclasses.replace(train_cfg, output_dir=str(output / "phase2"), max_steps=steps,
                               warmup_steps=warmup, warmup_ratio=None, stop_at_cpu_seconds=stop_at,
                               stop_at_step=None,  # (a step of phase 1's count)
                               resume=train_cfg.resume if has_state else False)


def whole_run(result: TrainResult, output: Path) -> TrainResult:
    """Phase 2's result with the run's totals: its tokens and seconds plus phase 1's (what
    phase 1's last state recorded), so a caller reads what the whole run cost."""
    first = saved_cost(output)
    return dataclasses.replace(
        result, tokens_seen=result.tokens_seen + int(first["tokens_seen"]),
        train_seconds=result.train_seconds + float(first["train_seconds"]),
        cpu_seconds=result.cpu_seconds + float(first["cpu_seconds"]))


def run_pretraining(cfg: PretrainConfig) -> TrainResult:
    """The whole run: model, phase 1 (and phase 2), then the release export `OUTPUT/model`."""
    tokenizer = load_tokenizer(cfg)
    folders = data_folders(cfg.data)
    metas = [read_meta(folder) for folder in folders]
    config = model_config(cfg, metas[0].tokenizer.vocab_size,
                          max(int(m.params["max_seq_length"]) for m in metas))
    output = Path(cfg.train.output_dir)
    inputs = [*map(str, folders), *(p for p in (cfg.init, cfg.tokenizer, cfg.eval_data,
                                                cfg.phase2_data) if p is not None)]
    folder = RunFolder(output, PRETRAIN_MARKER, dataclasses.asdict(cfg), cfg.train.resume,
                       inputs=inputs)
    if distributed.is_main():  # before any work: a refused --resume changes nothing on disk
        folder.resumes()
    with folder.claimed():
        try:
            return _run_phases(cfg, config, tokenizer, output)
        finally:
            release_output_dir(output / "phase2")  # the loop's lock on phase 2's folder


def _run_phases(cfg: PretrainConfig, config: BertConfig, tokenizer, output: Path) -> TrainResult:
    """run_pretraining's phase 1 (and phase 2) and the export, in its claimed folder."""
    model = build_model(cfg, config)
    cfg = dataclasses.replace(cfg, train=capped_warmup(cfg.train))
    phase2, result = cfg.phase2_data is not None, None
    if phase2 and latest_checkpoint(output / "phase2") is not None:
        log.info("phase 1 finished earlier; resuming phase 2 from %s", output / "phase2")
    else:
        first = cfg
        if phase2 and cfg.eval_data is None:
            first = dataclasses.replace(cfg, eval_holdout=matched_holdout(cfg, config,
                                                                          tokenizer))
        result = run_phase(first, model, cfg.data, tokenizer, cfg.train)
        # a phase 1 stopped by its CPU budget continues in the next sitting, never in
        # phase 2 (which would start from half-trained weights)
        phase2 = phase2 and result.step >= cfg.train.max_steps
    p2 = phase2_config(cfg.train, output, cfg.phase2_steps) if phase2 else None
    if p2 is not None:
        result = whole_run(run_phase(cfg, model, cfg.phase2_data, tokenizer, p2), output)
    elif phase2 and result is not None:
        log.info("the CPU budget was spent at the end of phase 1; phase 2 starts in the "
                 "next sitting")
    if result is None:
        raise BertkitError(f"{output}: phase 1 alone cost {saved_cost(output)['cpu_seconds']:.0f} "
                           f"CPU-s, the whole budget ({cfg.train.stop_at_cpu_seconds:.0f}): "
                           "phase 2 cannot continue within it")
    if distributed.is_main():
        export(model, tokenizer, output / "model")
    distributed.barrier()
    return result


def export(model: BertForPreTraining | BertForMaskedLM, tokenizer, directory: Path) -> None:
    """The release export: HF layout (loadable by `transformers`) + the tokenizer files."""
    model.save_pretrained(directory)
    if tokenizer is not None:
        tokenizer.save_pretrained(directory)
    else:
        log.warning("%s: exported without tokenizer files (pass --tokenizer DIR)", directory)
    log.info("exported %s", directory)
