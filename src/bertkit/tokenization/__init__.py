"""Tokenization: BERT's basic tokenizer and WordPiece (see `basic` and `wordpiece`)."""

from bertkit.tokenization.basic import pretokenize, pretokenize_with_offsets
from bertkit.tokenization.encoding import Encoding
from bertkit.tokenization.wordpiece import BertTokenizer, load_vocab

__all__ = ["BertTokenizer", "Encoding", "load_vocab", "pretokenize", "pretokenize_with_offsets"]
