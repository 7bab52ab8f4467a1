"""`bertkit embed` feature tables: table inputs and their columns, the four output formats with
ids first, the sidecar, batch-invariant vectors, refusals that write nothing, atomic output and
memory that stays flat in the number of texts."""

import csv
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from bertkit.cli.main import main
from bertkit.inference import Encoder
from bertkit.inference.encoder import text_windows
from bertkit.inference.files import write_vectors
from tests.cli.test_inference_cli import model_dir  # noqa: F401  (the tiny model fixture)

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

ROWS = [("r1", "the cat sat on the mat."), ("r2", "hello world!"), ("r3", "the dog " * 40),
        ("r4", "a dog, and a cat")]


def write_csv(path, rows, header=("doc", "review")):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def embed(model, src, out, *extra):
    return main(["embed", str(model), "--input", str(src), "--output", str(out), "--no-progress",
                 "--text-column", "review", *extra])


def test_csv_to_every_format_ids_first_with_sidecar(model_dir, tmp_path):  # noqa: F811
    src = write_csv(tmp_path / "reviews.csv", ROWS)
    want = Encoder(model_dir, precision="fp32").encode([t for _, t in ROWS], pooling="mean")
    for suffix in (".csv", ".parquet", ".jsonl"):
        out = tmp_path / f"features{suffix}"
        assert embed(model_dir, src, out, "--id-column", "doc") == 0
        if suffix == ".csv":
            with open(out, newline="") as f:
                table = list(csv.reader(f))
            assert table[0][:3] == ["doc", "e0", "e1"] and len(table[0]) == 1 + 128
            ids = [row[0] for row in table[1:]]
            vectors = np.array([row[1:] for row in table[1:]], dtype=np.float64).astype(np.float32)
        elif suffix == ".parquet":
            read = pq.read_table(out)
            ids = read.column("doc").to_pylist()
            vectors = np.stack([read.column(f"e{j}").to_numpy() for j in range(128)], axis=1)
            meta = json.loads(read.schema.metadata[b"bertkit"])
            assert meta == json.loads((tmp_path / "features.parquet.json").read_text())
        else:
            records = [json.loads(line) for line in out.read_text().splitlines()]
            assert list(records[0]) == ["doc", "index", "embedding"]
            ids = [r["doc"] for r in records]
            vectors = np.array([r["embedding"] for r in records], dtype=np.float32)
        assert ids == ["r1", "r2", "r3", "r4"], suffix
        np.testing.assert_allclose(vectors, want, atol=1e-5 if suffix == ".jsonl" else 1e-6)
        if suffix == ".csv":  # 9 significant digits: read back, the same float32 bits
            assert np.array_equal(vectors, np.load(_npy(model_dir, src, tmp_path)))
    sidecar = json.loads((tmp_path / "features.csv.json").read_text())
    assert sidecar["pooling"] == "mean" and sidecar["layers"] == [-1]
    assert sidecar["precision"] == "fp32" and sidecar["vectors"] == "batch-invariant"
    assert sidecar["texts"] == 4 and sidecar["truncated"] == 1 and sidecar["max_length"] == 32
    assert sidecar["normalize"] is False and sidecar["model"] == str(model_dir.resolve())
    assert sidecar["id_column"] == "doc" and sidecar["dimensions"] == 128


def _npy(model, src, tmp_path):
    out = tmp_path / "same.npy"
    if not out.exists():
        assert embed(model, src, out) == 0
    return out


def test_row_numbers_are_the_ids_without_an_id_column(model_dir, tmp_path):  # noqa: F811
    src = tmp_path / "texts.jsonl"
    src.write_text("".join(json.dumps({"review": t, "n": i}) + "\n" for i, (_, t) in enumerate(ROWS)))
    out = tmp_path / "f.parquet"
    assert embed(model_dir, src, out, "--layers=-1,-2", "--normalize") == 0
    read = pq.read_table(out)
    assert read.column("id").to_pylist() == [1, 2, 3, 4] and read.num_columns == 1 + 2 * 128
    meta = json.loads(read.schema.metadata[b"bertkit"])
    assert meta["layers"] == [-1, -2] and meta["dimensions"] == 256 and meta["normalize"] is True


def test_parquet_and_tsv_inputs_with_integer_ids_and_pairs(model_dir, tmp_path):  # noqa: F811
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"key": [10, 20], "review": ["the cat", "a dog"],
                             "b": ["hello", "world"]}), src)
    out = tmp_path / "f.csv"
    assert embed(model_dir, src, out, "--id-column", "key", "--pair-column", "b") == 0
    with open(out, newline="") as f:
        table = list(csv.reader(f))
    assert [row[0] for row in table] == ["key", "10", "20"]
    pairs = Encoder(model_dir, precision="fp32").encode(["the cat", "a dog"], ["hello", "world"],
                                                        pooling="mean")
    np.testing.assert_allclose(np.array([r[1:] for r in table[1:]], dtype=float), pairs, atol=1e-6)
    tsv = tmp_path / "in.tsv"
    tsv.write_text('review\tid\n"quoted" start\t7\n')
    assert embed(model_dir, tsv, tmp_path / "t.jsonl", "--id-column", "id") == 0
    record = json.loads((tmp_path / "t.jsonl").read_text())
    assert record["id"] == "7" and record["index"] == 0


def test_same_text_same_bits_whatever_the_batch_and_neighbours(model_dir, tmp_path):  # noqa: F811
    rng = np.random.default_rng(0)
    words = "the a cat dog sat on mat and of to in is was hello world paris".split()
    texts = [" ".join(rng.choice(words, rng.integers(1, 25))) for _ in range(24)]
    first = write_csv(tmp_path / "a.csv", [(f"t{i}", t) for i, t in enumerate(texts)])
    others = texts[::-1][:12] + [" ".join(rng.choice(words, 9)) for _ in range(12)]
    second = write_csv(tmp_path / "b.csv", [(f"u{i}", t) for i, t in enumerate(others)])
    assert embed(model_dir, first, tmp_path / "a.npy", "--batch-size", "32") == 0
    assert embed(model_dir, second, tmp_path / "b.npy", "--batch-size", "3") == 0
    a, b = np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy")
    for j, text in enumerate(others[:12]):
        assert np.array_equal(b[j], a[texts.index(text)]), text
    # the encoder's default batching, by contrast, is allowed to differ in the last bits
    enc = Encoder(model_dir, precision="fp32")
    np.testing.assert_allclose(enc.encode(texts, pooling="mean"), a, atol=1e-5)


def test_explicit_reduced_precision_says_batch_dependent(model_dir, tmp_path):  # noqa: F811
    src = write_csv(tmp_path / "r.csv", ROWS)
    assert embed(model_dir, src, tmp_path / "q.npy", "--precision", "int8") == 0
    sidecar = json.loads((tmp_path / "q.npy.json").read_text())
    assert sidecar["precision"] == "int8" and sidecar["vectors"] == "batch-dependent"


def test_npy_bytes_are_np_save_bytes(model_dir, tmp_path):  # noqa: F811
    vectors = np.random.default_rng(1).standard_normal((5, 7)).astype(np.float32)
    write_vectors(tmp_path / "ours.npy", vectors)
    np.save(tmp_path / "numpy.npy", vectors)
    assert (tmp_path / "ours.npy").read_bytes() == (tmp_path / "numpy.npy").read_bytes()


@pytest.mark.parametrize("content,extra,message", [
    ("doc,body\nr1,x\n", [], r"a\.csv: no column 'review' \(its columns: doc, body\); choose one "
                             r"with --text-column"),
    ("doc,review\nr1,x\n", ["--pair-column", "b"], r"no column 'b' .*--pair-column"),
    ("doc,review\nr1,the cat\nr2,a dog\nr1,again\n", ["--id-column", "doc"],
     r"a\.csv: id 'r1' appears twice in column 'doc' \(line 2 and line 4\)"),
    ("doc,review\nr1,the cat\nr2,\"  \"\n", [], r"a\.csv:3: empty text in column 'review'"),
    ("doc,review\nr1,the cat\n", ["--layers=-1,-9"], r"layer -9 out of range for a 2-layer model"),
    ("doc,review\n,the cat\n", ["--id-column", "doc"], r"a\.csv:2: empty id in column 'doc'"),
])
def test_refusals_one_line_nothing_written(model_dir, tmp_path, capsys, content, extra,  # noqa: F811
                                           message):
    src = tmp_path / "a.csv"
    src.write_text(content, encoding="utf-8")
    out = tmp_path / "f.parquet"
    assert embed(model_dir, src, out, *extra) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bertkit: error:"), err
    assert __import__("re").search(message, err[0]), err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv"]


def test_jsonl_and_parquet_refusals(model_dir, tmp_path, capsys):  # noqa: F811
    src = tmp_path / "a.jsonl"
    src.write_text('{"review": "x", "doc": 1}\n{"text": "y", "doc": 2}\n')
    assert embed(model_dir, src, tmp_path / "f.csv") == 1
    assert "a.jsonl:2: no field 'review' (its fields: text, doc)" in capsys.readouterr().err
    pq.write_table(pa.table({"review": ["a", "b"], "doc": [3, 3]}), tmp_path / "p.parquet")
    assert embed(model_dir, tmp_path / "p.parquet", tmp_path / "f.csv", "--id-column", "doc") == 1
    assert "id 3 appears twice in column 'doc' (row 1 and row 2)" in capsys.readouterr().err
    assert embed(model_dir, src, tmp_path / "f.npy", "--id-column", "doc") == 1
    assert "a .npy holds the vectors only" in capsys.readouterr().err
    assert not list(tmp_path.glob("f.*"))


def test_existing_sidecar_is_never_replaced(model_dir, tmp_path, capsys):  # noqa: F811
    src = write_csv(tmp_path / "r.csv", ROWS)
    (tmp_path / "f.csv.json").write_text("mine")
    assert embed(model_dir, src, tmp_path / "f.csv") == 1
    assert "f.csv.json already exists" in capsys.readouterr().err
    assert (tmp_path / "f.csv.json").read_text() == "mine" and not (tmp_path / "f.csv").exists()


@pytest.mark.parametrize("stop", ["interrupt", "kill"])
def test_stopped_run_leaves_no_output_that_looks_whole(model_dir, tmp_path, stop):  # noqa: F811
    """A run stopped after its first window: interrupted, it removes its temporary file; killed
    (SIGKILL), at most a hidden temporary file is left, never OUTPUT or its sidecar."""
    src = tmp_path / "t.txt"
    src.write_text("the cat sat\n" * 50)
    out = tmp_path / "v.npy"
    stopping = "raise KeyboardInterrupt" if stop == "interrupt" else "os.kill(os.getpid(), 9)"
    script = textwrap.dedent(f"""
        import os, sys
        import bertkit.cli.inference_cmds as cmds
        from bertkit.cli.main import main
        real = cmds.record_windows
        def stop_after_one(*args, **kwargs):
            yield next(real(*args, size=16))
            {stopping}
        cmds.record_windows = stop_after_one
        sys.exit(main(["embed", {str(model_dir)!r}, "--input", {str(src)!r}, "--output",
                       {str(out)!r}, "--no-progress"]))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode != 0
    left = sorted(p.name for p in tmp_path.iterdir())
    if stop == "interrupt":
        assert left == ["t.txt"], proc.stderr
    else:
        assert "v.npy" not in left and "v.npy.json" not in left
        assert all(name == "t.txt" or name.startswith(".v.npy.") for name in left), left


def test_encode_windows_streams_and_keeps_keys(model_dir):  # noqa: F811
    enc = Encoder(model_dir, precision="fp32")
    texts = [f"the cat {'sat ' * (i % 5)}" for i in range(23)]
    windows = list(text_windows(texts, size=10))
    assert [len(w.texts) for w in windows] == [10, 10, 3]
    out = list(enc.encode_windows(windows, total=23, pooling="mean"))
    assert [w for w, _ in out] == windows and enc.last_stats.texts == 23
    np.testing.assert_allclose(np.concatenate([v for _, v in out]),
                               enc.encode(texts, pooling="mean"), atol=1e-6)


MEMORY_PROBE = """
import functools, resource, sys
from bertkit.cli.main import main
try:  # windows of 512 texts: the input spans many windows, as a large one does at the default
    import bertkit.cli.inference_cmds as cmds
    cmds.record_windows = functools.partial(cmds.record_windows, size=512)
except AttributeError:  # a whole-input version, to see this test fail
    pass
code = main(["embed", sys.argv[1], "--input", sys.argv[2], "--output", sys.argv[3], "--no-progress",
             "--batch-size", "64"])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
sys.exit(code)
"""


def peak_rss_kb(model, n: int, folder) -> int:
    """Peak RSS of `bertkit embed` on n short lines into a .npy, in a fresh process (one
    thread: on a busy machine two spin-waiting threads only slow it down)."""
    src = folder / f"{n}.txt"
    src.write_text("".join(f"line {i} the cat sat\n" for i in range(n)))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", MEMORY_PROBE, str(model), str(src),
                           str(folder / f"{n}.npy")], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.split()[-1])


def test_peak_memory_is_flat_in_the_number_of_texts(model_dir, tmp_path):  # noqa: F811
    """2,000 and 16,000 short lines in windows of 512: eight times the texts, at most a few
    megabytes more (the vectors go to disk a window at a time). Holding every text's tokens, as
    a whole-input run does, takes some 30 MB more at 16,000."""
    small, large = peak_rss_kb(model_dir, 2_000, tmp_path), peak_rss_kb(model_dir, 16_000, tmp_path)
    assert large < small * 1.03 + 8_000, (small, large)
