"""`meta.json`: what a folder made by `bertkit prepare` holds, as typed values.

Two kinds of folder carry one, told apart by the file's "format":

- a prepared folder of shards (`ShardMeta`, format `bertkit-pretraining-shards`), written by
  `bertkit prepare` and `bertkit merge-shards`, read by `ShardDataset` and pre-training;
- one part of a preparation (`PartMeta`, format `bertkit-prepare-part`), written by
  `prepare --part I/N` and read by `merge-shards`.

Both record the `Preparation` (inputs, parameters, tokenizer, token dtype) that made them: a
resume, the parts of one corpus and their merge must share it. Each file carries "version";
a file without one predates the key and is version 1 (the only version so far), so folders
prepared before it still load. A newer version, a missing key or a file that is not JSON is a
BertkitError naming the file.

The values are frozen: a writer makes a new one (`dataclasses.replace`) for each rewrite. The
`params` and `stats` mappings stay plain JSON dicts (their keys are the preparation's
parameters and counters, owned by `prepare.PrepareConfig` and `chunks.ChunkStats`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from bertkit.errors import BertkitError
from bertkit.io import atomic_write_text, read_json_object

META_NAME = "meta.json"
FORMAT_NAME = "bertkit-pretraining-shards"
PART_FORMAT = "bertkit-prepare-part"
VERSION = 1  # of both formats; bump it when a reader of today would misread the file


def piece_name(chunk: int) -> str:
    """The folder of one chunk's instances in a part (shard layout)."""
    return f"chunk-{chunk:08d}"


@dataclass(frozen=True)
class TokenizerInfo:
    """The vocabulary the instances were tokenized with (shards of another are refused)."""

    fingerprint: str
    vocab_size: int
    do_lower_case: bool
    pad_token_id: int
    cls_token_id: int
    sep_token_id: int
    mask_token_id: int

    @classmethod
    def of(cls, tokenizer: Any) -> TokenizerInfo:
        return cls(tokenizer.fingerprint(), tokenizer.vocab_size, tokenizer.do_lower_case,
                   tokenizer.pad_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id,
                   tokenizer.mask_token_id)


@dataclass(frozen=True)
class ShardEntry:
    """One finished shard."""

    name: str
    instances: int
    tokens: int
    predictions: int | None = None  # masked positions; absent in folders of early versions

    def to_json(self) -> dict[str, Any]:
        # by hand, not dataclasses.asdict (a deep copy): meta.json is rewritten after every
        # shard with every entry, and asdict made a 3,000-shard preparation minutes slower
        data = {"name": self.name, "instances": self.instances, "tokens": self.tokens}
        if self.predictions is not None:
            data["predictions"] = self.predictions
        return data


@dataclass(frozen=True)
class ResumeCursor:
    """Where the next shard starts: the (chunk, offset) of the first instance not yet written,
    and the statistics (`ChunkStats` fields) of the chunks before that chunk."""

    next_chunk: int
    next_offset: int
    stats: dict[str, int]


@dataclass(frozen=True)
class Preparation:
    """What made the instances: every field shapes them."""

    inputs: tuple[str, ...]
    params: dict[str, Any]  # PrepareConfig.params() and the sentence splitter
    tokenizer: TokenizerInfo
    token_dtype: str | None  # absent in folders of early versions: then from the vocabulary size

    def preparation(self) -> Preparation:
        return Preparation(self.inputs, self.params, self.tokenizer, self.token_dtype)


PREPARATION_FIELDS = tuple(f.name for f in dataclasses.fields(Preparation))


@dataclass(frozen=True)
class ShardMeta(Preparation):
    """The meta.json of a prepared folder of shards."""

    FORMAT: ClassVar[str] = FORMAT_NAME
    WHAT: ClassVar[str] = "prepared data"
    PIECE_PREFIX: ClassVar[str] = "shard-"
    # Fields a --resume must find unchanged (the token dtype follows from the vocabulary).
    RESUME_SAME: ClassVar[tuple[str, ...]] = ("inputs", "params", "tokenizer")
    # A finished folder may gain files of its own (a README, a copy of the vocabulary) and still
    # be resumed or replaced; only an empty or bertkit-only folder may be started in.
    OTHER_FILES_BESIDE_META: ClassVar[bool] = True

    complete: bool = False
    shards: tuple[ShardEntry, ...] = ()
    # Where each chunk's instances start in the folder: a held-out split cut there shares no
    # document with training (training.pretrain.split_eval). Empty in early versions' folders.
    chunk_starts: tuple[int, ...] = ()
    resume: ResumeCursor | None = None  # while unfinished, after the first shard
    num_instances: int | None = None  # once complete
    stats: dict[str, Any] | None = None  # once complete: {"corpus": ..., "instances": ...}
    version: int = VERSION

    @classmethod
    def fresh(cls, preparation: Preparation) -> ShardMeta:
        return cls(**_preparation_fields(preparation))

    def piece_names(self) -> set[str]:
        return {s.name for s in self.shards}

    def to_json(self) -> dict[str, Any]:
        data = {"format": self.FORMAT, "version": self.version, "complete": self.complete,
                **_preparation_json(self),
                "shards": [s.to_json() for s in self.shards],
                "chunk_starts": list(self.chunk_starts),
                "resume": None if self.resume is None else dataclasses.asdict(self.resume),
                "num_instances": self.num_instances, "stats": self.stats}
        return _without_none(data)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str) -> ShardMeta:
        if data.get("format") == PART_FORMAT:
            raise BertkitError(f"{where}: one part of a preparation (`prepare --part`); join the "
                               "parts with `bertkit merge-shards PART... --output DIR` first")
        if data.get("format") != FORMAT_NAME:
            raise BertkitError(f"{where}: expected {FORMAT_NAME} version {VERSION}, got format "
                               f"{data.get('format')!r}")
        version = _check_version(data, where)
        return _parsed(where, lambda: cls(
            **_preparation_from(data, where), version=version,
            complete=bool(_required(data, "complete", where)),
            shards=tuple(_typed(ShardEntry, s, where, "shards[]")
                         for s in _required(data, "shards", where)),
            chunk_starts=tuple(int(c) for c in data.get("chunk_starts") or ()),
            resume=None if data.get("resume") is None
            else _typed(ResumeCursor, data["resume"], where, "resume"),
            num_instances=None if data.get("num_instances") is None
            else int(data["num_instances"]),
            stats=data.get("stats")))


@dataclass(frozen=True)
class PartMeta(Preparation):
    """The meta.json of one part (`prepare --part I/N`): a piece per finished chunk."""

    FORMAT: ClassVar[str] = PART_FORMAT
    WHAT: ClassVar[str] = "a prepared part"
    PIECE_PREFIX: ClassVar[str] = "chunk-"
    RESUME_SAME: ClassVar[tuple[str, ...]] = (*PREPARATION_FIELDS, "part", "parts")
    # A part is scratch for one merge: nothing but its own files, ever.
    OTHER_FILES_BESIDE_META: ClassVar[bool] = False

    part: int
    parts: int
    complete: bool = False
    chunks: dict[int, dict[str, int]] = field(default_factory=dict)  # chunk -> its ChunkStats
    num_chunks: int | None = None  # once complete: chunks in the whole corpus
    corpus: dict[str, Any] | None = None  # once complete: the CorpusStats of reading it
    version: int = VERSION

    @classmethod
    def fresh(cls, preparation: Preparation, part: int, parts: int) -> PartMeta:
        return cls(**_preparation_fields(preparation), part=part, parts=parts)

    def piece_names(self) -> set[str]:
        return {piece_name(c) for c in self.chunks}

    def to_json(self) -> dict[str, Any]:
        data = {"format": self.FORMAT, "version": self.version, "complete": self.complete,
                **_preparation_json(self), "part": self.part, "parts": self.parts,
                "chunks": {str(k): v for k, v in self.chunks.items()},
                "num_chunks": self.num_chunks, "corpus": self.corpus}
        return _without_none(data)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str) -> PartMeta:
        if data.get("format") != PART_FORMAT:
            raise BertkitError(f"{where}: not a part (made by `bertkit prepare --part I/N`)")
        version = _check_version(data, where)
        return _parsed(where, lambda: cls(
            **_preparation_from(data, where), version=version,
            part=int(_required(data, "part", where)), parts=int(_required(data, "parts", where)),
            complete=bool(_required(data, "complete", where)),
            chunks={int(k): dict(v) for k, v in _required(data, "chunks", where).items()},
            num_chunks=None if data.get("num_chunks") is None else int(data["num_chunks"]),
            corpus=data.get("corpus")))


AnyMeta = TypeVar("AnyMeta", ShardMeta, PartMeta)


def read_json(folder: str | os.PathLike) -> dict[str, Any]:
    """The meta.json of `folder` as JSON, whatever its format."""
    meta_path = Path(folder) / META_NAME
    if not meta_path.is_file():
        raise BertkitError(f"{folder}: no {META_NAME}; not a directory made by `bertkit prepare`")
    return read_json_object(meta_path)


def read_as(kind: type[AnyMeta], folder: str | os.PathLike) -> AnyMeta:
    """The meta.json of `folder`, of the kind `kind` (finished or not)."""
    return kind.from_json(read_json(folder), str(Path(folder) / META_NAME))


def read_meta(folder: str | os.PathLike) -> ShardMeta:
    """The meta.json of a prepared folder of shards."""
    return read_as(ShardMeta, folder)


def read_part_meta(folder: str | os.PathLike) -> PartMeta:
    """The meta.json of one part of a preparation."""
    return read_as(PartMeta, folder)


def write_meta(folder: Path, meta: ShardMeta | PartMeta) -> None:
    atomic_write_text(folder / META_NAME, meta_text(meta.to_json()))


def meta_text(data: Mapping[str, Any]) -> str:
    """meta.json's text: a key a line, a list an item a line (a shard's entry on one line).
    meta.json is rewritten after every shard, and `json.dumps(indent=...)` runs json's
    pure-Python encoder: with 3,000 shards the rewrites took minutes. Each value here goes
    through the C encoder; the text is as deterministic and as `json.loads`-able as before."""

    def value(v: Any) -> str:
        if isinstance(v, list) and v:
            items = ",\n".join("    " + json.dumps(x, sort_keys=True) for x in v)
            return "[\n" + items + "\n  ]"
        return json.dumps(v, sort_keys=True)

    lines = [f"  {json.dumps(k)}: {value(v)}" for k, v in sorted(data.items())]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def check_vocabulary(
    meta: ShardMeta, where: str, fingerprint: str | None, vocab_size: int | None
) -> None:
    """Refuse shards tokenized with another vocabulary than the model's."""
    tok = meta.tokenizer
    if fingerprint is not None and fingerprint != tok.fingerprint:
        raise BertkitError(
            f"{where}: prepared with tokenizer {tok.fingerprint[:12]}, but the model uses "
            f"{fingerprint[:12]}; re-run `bertkit prepare` with the model's tokenizer"
        )
    if vocab_size is not None and vocab_size != tok.vocab_size:
        raise BertkitError(
            f"{where}: prepared with a vocabulary of {tok.vocab_size} tokens, but the model has "
            f"vocab_size={vocab_size}; re-run `bertkit prepare` with the model's tokenizer"
        )


# What the instances of several folders must share to be trained on as one dataset.
_SHARED_PARAMS = ("objective", "dynamic_masking", "masked_lm_prob", "max_predictions_per_seq",
                  "whole_word_mask", "mask_unk")


def join_metas(paths: list[Path], metas: list[ShardMeta]) -> ShardMeta:
    """The meta of several prepared folders read as one dataset (instances one folder after
    the other); folders of another tokenizer, objective or masking are refused."""
    first = metas[0]
    for folder, meta in zip(paths[1:], metas[1:]):
        if meta.tokenizer != first.tokenizer:
            raise BertkitError(f"{folder}: prepared with another tokenizer than {paths[0]}; "
                               "prepare every --data folder with one vocabulary")
        for key in _SHARED_PARAMS:
            if meta.params.get(key) != first.params.get(key):
                raise BertkitError(f"{folder}: {key}={meta.params.get(key)!r} but {paths[0]} "
                                   f"has {first.params.get(key)!r}; --data folders must share "
                                   "the objective and the masking")
    chunk_starts: list[int] = []
    offset = 0
    for meta in metas:  # held-out splits may still cut at a chunk start
        chunk_starts += [offset + c for c in meta.chunk_starts]
        offset += int(meta.num_instances or 0)
    params = {**first.params,
              "max_seq_length": max(int(m.params["max_seq_length"]) for m in metas)}
    return dataclasses.replace(first, shards=tuple(s for m in metas for s in m.shards),
                               chunk_starts=tuple(chunk_starts), params=params,
                               num_instances=offset)


# ---- reading helpers: a bad file is one BertkitError that names it ---------------------------

def _check_version(data: Mapping[str, Any], where: str) -> int:
    version = data.get("version", 1)  # written before the key existed: version 1
    if version != VERSION:
        raise BertkitError(f"{where}: {data.get('format')} version {version!r}, but this bertkit "
                           f"reads version {VERSION}; a newer bertkit wrote it (upgrade, or "
                           "prepare the data again)")
    return version


def _required(data: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in data:
        raise BertkitError(f"{where}: missing key {key!r}; the file is damaged or not written "
                           "by `bertkit prepare` (prepare the data again)")
    return data[key]


def _typed(kind: type, data: Any, where: str, what: str) -> Any:
    """`kind` (a dataclass) from its JSON object; keys it does not know are left aside."""
    if not isinstance(data, Mapping):
        raise BertkitError(f"{where}: {what} should be a JSON object, got {data!r}")
    names = [f.name for f in dataclasses.fields(kind)]
    required = [f.name for f in dataclasses.fields(kind)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    for key in required:
        if key not in data:
            raise BertkitError(f"{where}: missing key {key!r} in {what}; the file is damaged or "
                               "not written by `bertkit prepare` (prepare the data again)")
    return kind(**{k: data[k] for k in names if k in data})


def _parsed(where: str, build: Callable[[], AnyMeta]) -> AnyMeta:
    """build(), with a value of the wrong JSON type reported as the file's damage."""
    try:
        return build()
    except BertkitError:
        raise  # already names the file and the key
    except (TypeError, ValueError, AttributeError) as err:
        raise BertkitError(f"{where}: malformed ({err}); prepare the data again") from err


def _preparation_from(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    params = _required(data, "params", where)
    if not isinstance(params, dict):
        raise BertkitError(f"{where}: params should be a JSON object, got {params!r}")
    return {"inputs": tuple(str(p) for p in _required(data, "inputs", where)),
            "params": params,
            "tokenizer": _typed(TokenizerInfo, _required(data, "tokenizer", where), where,
                                "tokenizer"),
            "token_dtype": data.get("token_dtype")}


def _preparation_fields(preparation: Preparation) -> dict[str, Any]:
    return {name: getattr(preparation, name) for name in PREPARATION_FIELDS}


def _preparation_json(meta: Preparation) -> dict[str, Any]:
    return {"inputs": list(meta.inputs), "params": meta.params,
            "tokenizer": dataclasses.asdict(meta.tokenizer), "token_dtype": meta.token_dtype}


def _without_none(data: dict[str, Any]) -> dict[str, Any]:
    """Optional keys are absent, not null, on disk (as the files of every version have them)."""
    return {k: v for k, v in data.items() if v is not None}
