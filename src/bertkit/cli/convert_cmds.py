"""`bertkit convert google SRC --output DIR`: a Google BERT checkpoint (TensorFlow) -> HF layout."""

from __future__ import annotations

import argparse
from pathlib import Path

from bertkit.google.convert import GoogleConversion, convert_google, summary


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("convert", help="convert another format's BERT into a model folder",
                              description="Convert a BERT saved in another format into a model "
                              "folder in HF layout (config.json, model.safetensors, vocab.txt), "
                              "which bertkit and transformers load.")
    sub = p.add_subparsers(dest="convert_command", metavar="FORMAT")
    g = sub.add_parser(
        "google", help="a google-research/bert TensorFlow checkpoint (no TensorFlow needed)",
        description="Convert a google-research/bert checkpoint: a release folder "
        "(bert_config.json, vocab.txt, bert_model.ckpt.index + .data-*) or the output of "
        "run_pretraining.py, run_classifier.py or run_squad.py. The heads in the checkpoint "
        "decide the model: pre-training heads -> BertForPreTraining, run_classifier's "
        "output_weights -> BertForSequenceClassification, run_squad's cls/squad -> "
        "BertForQuestionAnswering, none -> BertModel. Optimizer slots and global_step are "
        "left out. Every tensor is checked (shape against the config, CRC32C) before "
        "anything is written.")
    g.add_argument("source", type=Path, metavar="SRC",
                   help="the folder holding the checkpoint, or a checkpoint prefix "
                   "(DIR/model.ckpt-1000); a run folder's latest checkpoint is taken from its "
                   "`checkpoint` file")
    g.add_argument("--output", type=Path, required=True, metavar="DIR",
                   help="a new or empty folder for the converted model")
    g.add_argument("--lowercase", action=argparse.BooleanOptionalAction, default=None,
                   help="lower-case input text (uncased models) or not (cased); default: from "
                   "the folder's name (uncased_..., cased_...), checked against the vocabulary, "
                   "or from the vocabulary alone (an uncased one has no capitals)")
    g.add_argument("--config", type=Path, metavar="FILE",
                   help="the model's bert_config.json (default: the one beside the checkpoint; "
                   "a run folder has none: give the release's the run started from)")
    g.add_argument("--vocab", type=Path, metavar="FILE",
                   help="the model's vocab.txt (default: the one beside the checkpoint)")
    g.add_argument("--labels", metavar="A,B,...",
                   help="a run_classifier.py checkpoint's label names, in the order its "
                   "processor's get_labels() lists them (default: LABEL_0, LABEL_1, ...)")
    g.add_argument("--overwrite", action="store_true",
                   help="replace an earlier conversion in --output")
    g.set_defaults(func=run_google)
    p.set_defaults(func=lambda args: p.print_help() or 2)


def run_google(args: argparse.Namespace) -> int:
    cfg = GoogleConversion(source=args.source, output=args.output, lowercase=args.lowercase,
                           config_file=args.config, vocab_file=args.vocab,
                           labels=tuple(args.labels.split(",")) if args.labels else None,
                           overwrite=args.overwrite)
    for line in summary(convert_google(cfg)):
        print(line)
    return 0
