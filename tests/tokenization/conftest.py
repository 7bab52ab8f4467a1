"""Fixtures for the tokenization tests: Google's test vocabulary and the real MiniLM one."""

from __future__ import annotations

from pathlib import Path

import pytest

from bertkit.tokenization import BertTokenizer

# google-research/bert tokenization_test.py's vocabulary, in its order (ids are positions).
GOOGLE_VOCAB = "[UNK] [CLS] [SEP] want ##want ##ed wa un runn ##ing ,".split()


@pytest.fixture
def google_vocab() -> dict[str, int]:
    return {token: index for index, token in enumerate(GOOGLE_VOCAB)}


@pytest.fixture
def padded_vocab(google_vocab: dict[str, int]) -> dict[str, int]:
    """Google's vocabulary plus [PAD] and [MASK], for batches that need padding."""
    return {**google_vocab, "[PAD]": len(google_vocab), "[MASK]": len(google_vocab) + 1}


@pytest.fixture(scope="session")
def minilm(minilm_path: Path) -> BertTokenizer:
    return BertTokenizer.from_pretrained(minilm_path)
