"""Build a large, varied corpus for scale measurements from the real text in ../shared/data.

The Gutenberg books and WikiText-2 are cut into paragraphs; documents are drawn as runs of 2-40
paragraphs from a random source, and 1% of their words get two inner letters swapped (as typos
and rare names do in real corpora: the number of distinct words keeps growing with the size,
instead of the ~40 MB of sources repeating the same vocabulary). Deterministic for a
seed; written as files of about 64 MB in WikiText's layout (`--format wikitext`: a ` = Title = `
line starts each document, then one paragraph per line), so `prepare` splits sentences as it
does for any prose.

    python benchmarks/make_corpus.py --size 1G --output /tmp/corpus-1g

Never commit the output.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
FILE_BYTES = 64 << 20


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("B")
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def paragraphs() -> list[list[str]]:
    """Every source's paragraphs (non-empty lines of WikiText; blank-line blocks of books)."""
    sources = []
    for book in sorted((DATA / "books").glob("*.txt")):
        blocks = book.read_text(encoding="utf-8").split("\n\n")
        sources.append([" ".join(b.split()) for b in blocks if len(b.split()) > 5])
    for wiki in sorted((DATA / "wikitext-2").glob("*.raw")):
        lines = wiki.read_text(encoding="utf-8").splitlines()
        sources.append([ln.strip() for ln in lines if len(ln.split()) > 5
                        and not ln.strip().startswith("=")])
    return [s for s in sources if s]


def document(rng: random.Random, sources: list[list[str]]) -> str:
    source = rng.choice(sources)
    start = rng.randrange(len(source))
    out = []
    for paragraph in source[start:start + rng.randint(2, 40)]:
        words = paragraph.split()
        for i, word in enumerate(words):
            if len(word) > 3 and rng.random() < 0.01:
                j = rng.randrange(1, len(word) - 2)
                words[i] = word[:j] + word[j + 1] + word[j] + word[j + 2:]
        out.append(" ".join(words))
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", required=True, help="e.g. 100M, 1G, 10G")
    ap.add_argument("--output", required=True, type=Path)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    target = parse_size(args.size)
    args.output.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    sources = paragraphs()
    written, index = 0, 0
    while written < target:
        path = args.output / f"part-{index:04d}.txt"
        size = 0
        with open(path, "w", encoding="utf-8") as f:
            while size < min(FILE_BYTES, target - written):
                text = f" = Document {index}.{size} = \n" + document(rng, sources) + "\n"
                f.write(text)
                size += len(text.encode("utf-8"))
        written += size
        index += 1
    print(f"{written / 2**20:,.0f} MiB in {index} file(s) under {args.output}")


if __name__ == "__main__":
    main()
