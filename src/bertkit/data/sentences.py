"""Sentence splitting: blingfire where it loads, else rules in pure Python.

blingfire (chosen over pysbd for speed and quality: docs/reports/benchmarks.md) ships x86-64 binaries
only; on Apple Silicon or aarch64 Linux its import or its first call fails. So it is imported
here, when sentences are first split, never by the CLI at start-up, and where it does not load
the rule-based splitter below takes over, with one log line. The two split some paragraphs
differently, which changes the instances `bertkit prepare` builds: its meta.json records the
splitter (`params.sentence_splitter`), and resuming or merging parts made with another is
refused.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable

logger = logging.getLogger(__name__)

RULES = "rules-v1"  # the pure-Python splitter's name, with a version for its rules

# Words after which "." does not end a sentence (lower case, without the period).
_ABBREVIATIONS = frozenset("""
mr mrs ms mx dr prof st sr jr rev hon gen col capt lt sgt cmdr adm gov pres sen rep messrs mme
mlle vs etc e.g i.e cf al approx dept est fig figs vol vols no nos op pp ch sec inc ltd co corp
bros jan feb mar apr jun jul aug sep sept oct nov dec mon tue wed thu fri sat sun mt ft
""".split())
# A candidate end: terminal punctuation, closing quotes or brackets, then whitespace.
_END = re.compile(r"[.!?]+[\"'”’)\]]*\s+")
# What may start the next sentence: an opening quote or bracket, then a capital or a digit.
_START = re.compile(r"[\"'“‘(\[]*[A-Z0-9\u00C0-\u00DE]")
_LAST_WORD = re.compile(r"(\S+)$")


def split_with_rules(text: str) -> list[str]:
    """Sentences of one paragraph by rule: a break after . ! or ? (and any closing quotes)
    followed by a space and a capital or digit, except after an abbreviation ("Mr.", "e.g.")
    or an initial ("J. K. Rowling")."""
    text = " ".join(text.split())
    sentences, start = [], 0
    for match in _END.finditer(text):
        if not _START.match(text, match.end()):
            continue
        word = _LAST_WORD.search(text, 0, match.start() + 1)
        before = word.group(1).lstrip("\"'“‘([").rstrip(".").lower() if word else ""
        if text[match.start()] == "." and (before in _ABBREVIATIONS
                                           or (len(before) == 1 and before.isalpha())):
            continue
        sentences.append(text[start:match.end()].strip())
        start = match.end()
    sentences.append(text[start:].strip())
    return [s for s in sentences if s]


@functools.cache
def splitter() -> tuple[str, Callable[[str], list[str]]]:
    """(name, split) of the splitter this process uses, chosen once: blingfire when it loads
    and runs, else `split_with_rules`."""
    try:
        import blingfire

        blingfire.text_to_sentences("It loads. It runs.")  # the native library loads here
    except (ImportError, OSError, AttributeError) as err:
        logger.warning("blingfire does not load on this platform (%s); splitting sentences with "
                       "bertkit's rules instead (%s)", err, RULES)
        return RULES, split_with_rules
    try:
        from importlib.metadata import version

        name = f"blingfire {version('blingfire')}"
    except Exception:  # metadata missing (a vendored copy): the name alone
        name = "blingfire"

    def split(text: str) -> list[str]:
        text = " ".join(text.split())
        if not text:
            return []
        return [s for s in blingfire.text_to_sentences(text).split("\n") if s.strip()]

    return name, split


def split_sentences(text: str) -> list[str]:
    """Sentences of one paragraph, by the splitter of this process (`splitter`)."""
    return splitter()[1](text)


def splitter_name() -> str:
    return splitter()[0]
