"""`bertkit prepare`: corpus files -> sharded, masked pre-training instances."""

from __future__ import annotations

import argparse
import os

from bertkit.data.chunks import ChunkConfig, default_max_predictions
from bertkit.data.corpus import FORMATS, Fields
from bertkit.data.instances import SHARD_OBJECTIVES, InstanceConfig
from bertkit.data.parts import merge_parts, parse_part, prepare_part
from bertkit.data.prepare import PrepareConfig, prepare
from bertkit.errors import BertkitError
from bertkit.io import check_output_outside
from bertkit.runs.pretrain_recipes import RECIPES, prepare_settings, recipe_help
from bertkit.tokenization import BertTokenizer

# the paper's values of the options a --recipe may set: the library's defaults
_INSTANCE, _CHUNK = InstanceConfig(), ChunkConfig(InstanceConfig())
PAPER = {"max_seq_length": _INSTANCE.max_seq_length, "objective": _INSTANCE.objective,
         "masked_lm_prob": _CHUNK.masked_lm_prob, "dynamic_masking": _CHUNK.dynamic_masking}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "prepare",
        help="build pre-training data (NSP/SOP pairs, MLM masks) in shards",
        description="Read a corpus, build BERT pre-training instances as Google's "
        "create_pretraining_data.py does, and write them as memory-mappable shards. "
        "Streams the corpus; the output is byte-identical for any --workers.",
    )
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="corpus files (text, JSONL, WikiExtractor output, Parquet, Arrow; .gz, "
                   ".bz2 or .zst), or folders of them (read recursively, in sorted order; a "
                   "`datasets` save_to_disk folder as its Arrow files)")
    p.add_argument("--tokenizer", required=True, metavar="DIR", help="directory with vocab.txt")
    p.add_argument("--output", required=True, metavar="DIR", help="output directory")
    p.add_argument("--format", choices=FORMATS, default="auto", help="corpus format (auto)")
    p.add_argument("--text-field", default="text", metavar="NAME",
                   help="the field (JSONL) or column (Parquet, Arrow, datasets folders) that "
                   "holds each document's text")
    p.add_argument("--id-field", metavar="NAME",
                   help="a field or column naming each document in messages (e.g. id, title)")
    p.add_argument("--recipe", choices=tuple(RECIPES), default="paper",
                   help="the defaults of --max-seq-length, --objective, --masked-lm-prob and "
                   "--dynamic-masking (the options given win); pre-train with the same "
                   f"--recipe. {recipe_help()}")
    p.add_argument("--max-seq-length", type=int, default=None,
                   help=f"(default: {PAPER['max_seq_length']}, or the --recipe's)")
    p.add_argument("--objective", choices=SHARD_OBJECTIVES, default=None,
                   help=f"(default: {PAPER['objective']}, or the --recipe's)")
    p.add_argument("--dupe-factor", type=int, default=None,
                   help="passes over the corpus with new pairs and masks (5; 1 if dynamic)")
    p.add_argument("--short-seq-prob", type=float, default=0.1)
    p.add_argument("--masked-lm-prob", type=float, default=None,
                   help=f"(default: {PAPER['masked_lm_prob']:g}, or the --recipe's)")
    p.add_argument("--max-predictions-per-seq", type=int, default=None,
                   help="cap on masked positions (default ceil(max_seq_length * masked_lm_prob))")
    p.add_argument("--whole-word-mask", action="store_true", help="mask whole words (Google WWM)")
    p.add_argument("--no-mask-unk", dest="mask_unk", action="store_false",
                   help="treat [UNK] as special: never masked, predicted or drawn as a random "
                   "replacement (default: an ordinary token, as in Google's script)")
    p.add_argument("--dynamic-masking", action=argparse.BooleanOptionalAction, default=None,
                   help="store unmasked instances; mask at batch time (DynamicMaskingCollate; "
                   "default: static masks, as the paper, or the --recipe's)")
    p.add_argument("--seed", type=int, default=12345)
    p.add_argument("--shard-size", type=int, default=100_000, help="instances per shard")
    p.add_argument("--chunk-chars", type=int, default=1_000_000,
                   help="characters per unit of work; random next sentences come from its "
                   "documents")
    p.add_argument("--workers", type=int, default=1, help="worker processes")
    p.add_argument("--part", metavar="I/N",
                   help="prepare part I of N (0-based) into --output, for N machines or array "
                   "tasks; `auto` takes it from a Slurm job array (SLURM_ARRAY_TASK_ID/COUNT) or "
                   "torchrun (RANK/WORLD_SIZE). Join the parts with `bertkit merge-shards`: the "
                   "result is byte-identical to one run without --part")
    p.add_argument("--resume", action="store_true", help="continue a killed run")
    p.add_argument("--overwrite", action="store_true", help="replace existing prepared data")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run_prepare)
    _register_merge(subparsers)


def _register_merge(subparsers: argparse._SubParsersAction) -> None:
    m = subparsers.add_parser(
        "merge-shards",
        help="join the parts of `prepare --part I/N` into one prepared folder",
        description="Join the folders written by `bertkit prepare --part I/N` (all N of them, any "
        "order) into one folder of shards: exactly what one `bertkit prepare` of the same inputs "
        "and seed writes.",
    )
    m.add_argument("parts", nargs="+", metavar="PART_DIR", help="the part folders")
    m.add_argument("--output", required=True, metavar="DIR", help="output directory")
    m.add_argument("--overwrite", action="store_true", help="replace existing prepared data")
    m.add_argument("--no-progress", action="store_true", help="no progress bar")
    m.set_defaults(func=run_merge)


def config_from_args(args: argparse.Namespace) -> PrepareConfig:
    recipe = {**PAPER, **prepare_settings(args.recipe)}
    for key, value in recipe.items():  # an option the command line gave wins
        if getattr(args, key) is None:
            setattr(args, key, value)
    dupe = args.dupe_factor if args.dupe_factor is not None else (
        1 if args.dynamic_masking else 5)
    max_pred = args.max_predictions_per_seq
    if max_pred is None:
        max_pred = default_max_predictions(args.max_seq_length, args.masked_lm_prob)
    instance = InstanceConfig(args.max_seq_length, args.short_seq_prob, args.objective)
    chunk = ChunkConfig(instance, dupe, args.masked_lm_prob, max_pred, args.whole_word_mask,
                        args.dynamic_masking, args.seed, args.mask_unk)
    return PrepareConfig(chunk, args.format, args.shard_size, args.chunk_chars,
                         Fields(args.text_field, args.id_field))


def run_prepare(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    world = os.environ.get("WORLD_SIZE", "1")
    if args.part is None and world.isdigit() and int(world) > 1:
        raise BertkitError(f"`bertkit prepare` under torchrun ({world} processes) needs --part "
                           "auto (each process prepares one part); without it every process "
                           "would write the same folder")
    check_output_outside(args.output, args.files)
    tokenizer = BertTokenizer.from_pretrained(args.tokenizer)
    if args.part is not None:
        part, parts = parse_part(args.part, os.environ)
        prepare_part(args.files, tokenizer, args.output, config, part=part, parts=parts,
                     workers=args.workers, resume=args.resume, overwrite=args.overwrite,
                     progress=not args.no_progress)
        print(f"part {part}/{parts} written to {args.output}; when all {parts} are done: bertkit "
              f"merge-shards PART_DIR... --output DIR")
        return 0
    prepare(args.files, tokenizer, args.output, config, workers=args.workers,
            resume=args.resume, overwrite=args.overwrite, progress=not args.no_progress)
    return 0


def run_merge(args: argparse.Namespace) -> int:
    meta = merge_parts(args.parts, args.output, overwrite=args.overwrite,
                       progress=not args.no_progress)
    print(f"{meta.num_instances} instances in {len(meta.shards)} shard(s) in {args.output}")
    return 0
