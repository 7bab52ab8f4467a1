"""`bertkit info MODEL_DIR`: what a checkpoint holds (config, parameters, vocabulary)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bertkit.checkpoint import read_state_dict
from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.io import read_json_object


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="show a model directory's config, parameter count and vocabulary",
                       description="Show the config, parameter count and vocabulary of an "
                                   "HF-layout BERT directory (config.json + model.safetensors).")
    p.add_argument("model", type=Path, help="model directory")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.set_defaults(func=run_info)


def describe(model_dir: Path) -> dict:
    config = BertConfig.load(model_dir)
    state = read_state_dict(model_dir)
    params = sum(t.numel() for name, t in state.items() if not name.endswith("position_ids"))
    vocab = model_dir / "vocab.txt"
    vocab_size = None
    if vocab.is_file():
        with vocab.open(encoding="utf-8") as f:
            vocab_size = sum(1 for _ in f)
    tok_cfg = model_dir / "tokenizer_config.json"
    lower = read_json_object(tok_cfg).get("do_lower_case") if tok_cfg.is_file() else None
    encoder_prefixes = ("bert.", "embeddings.", "encoder.", "pooler.")
    heads = sorted({name.split(".")[0] for name in state if not name.startswith(encoder_prefixes)})
    return {
        "path": str(model_dir),
        "architectures": config.extra.get("architectures"),
        "layers": config.num_hidden_layers,
        "hidden": config.hidden_size,
        "heads": config.num_attention_heads,
        "intermediate": config.intermediate_size,
        "max_positions": config.max_position_embeddings,
        "vocab_size": config.vocab_size,
        "parameters": params,
        "head_weights": heads,
        "vocab_file_entries": vocab_size,
        "do_lower_case": lower,
        "labels": config.id2label,
    }


def run_info(args: argparse.Namespace) -> int:
    if not args.model.is_dir():
        raise BertkitError(f"{args.model}: not a directory")
    info = describe(args.model)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    width = max(len(k) for k in info)
    for key, value in info.items():
        if key == "parameters":
            value = f"{value:,} ({value / 1e6:.1f}M)"
        print(f"{key:<{width}}  {value}")
    return 0
