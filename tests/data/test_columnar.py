"""The formats users bring at scale: Parquet, Arrow (file and stream), `datasets.save_to_disk`
folders, JSONL compressed with zstd, WikiExtractor's output; `--text-field`/`--id-field`; each on
a file the test writes, read as the same documents as the JSONL of the same records, and
prepared into the same shards."""

from __future__ import annotations

import filecmp
import gzip
import json

import pytest

from bertkit.cli.main import main
from bertkit.data.corpus import CorpusStats, Fields, read_corpus, sniff_format
from bertkit.errors import BertkitError
from bertkit.tokenization import BertTokenizer

pa = pytest.importorskip("pyarrow", reason="the columnar formats need pyarrow (the corpus extra)")
pq = pytest.importorskip("pyarrow.parquet")
zstandard = pytest.importorskip("zstandard", reason=".zst needs zstandard (the corpus extra)")

RECORDS = [
    {"id": 7, "title": "Cats", "body": "Cats sit on mats.\nThey purr.\n\nA new paragraph here."},
    {"id": 8, "title": "Empty", "body": ""},
    {"id": 9, "title": "Dogs", "body": "Dogs run under rugs. They bark at cats."},
    {"id": 10, "title": "Rain", "body": "It rained all day. The big red dog was wet."},
]


BODY = Fields("body", "id")


def read(paths, fmt="auto", fields=BODY):
    stats = CorpusStats()
    return list(read_corpus(paths, fmt, stats, fields)), stats


def write_jsonl(path, records, opener=open):
    with opener(path, "wt", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    return path


def table():
    return pa.table({k: [r[k] for r in RECORDS] for k in ("id", "title", "body")})


@pytest.fixture
def formats(tmp_path):
    """The same four records in every format."""
    out = {"jsonl": write_jsonl(tmp_path / "r.jsonl", RECORDS)}
    out["jsonl.gz"] = write_jsonl(tmp_path / "r.jsonl.gz", RECORDS, gzip.open)
    zst = tmp_path / "r.jsonl.zst"
    zst.write_bytes(zstandard.ZstdCompressor().compress(out["jsonl"].read_bytes()))
    out["jsonl.zst"] = zst
    pq.write_table(table(), tmp_path / "r.parquet", row_group_size=2)  # 2 row groups
    out["parquet"] = tmp_path / "r.parquet"
    with pa.OSFile(str(tmp_path / "file.arrow"), "wb") as sink:
        with pa.ipc.new_file(sink, table().schema) as writer:
            for batch in table().to_batches(max_chunksize=3):
                writer.write_batch(batch)
    out["arrow-file"] = tmp_path / "file.arrow"
    folder = tmp_path / "saved"  # the layout of datasets' save_to_disk: Arrow streams
    folder.mkdir()
    for i, part in enumerate((table().slice(0, 2), table().slice(2))):
        with pa.OSFile(str(folder / f"data-0000{i}-of-00002.arrow"), "wb") as sink:
            with pa.ipc.new_stream(sink, part.schema) as writer:
                writer.write_table(part)
    (folder / "state.json").write_text(json.dumps({"_data_files": [
        {"filename": "data-00000-of-00002.arrow"}, {"filename": "data-00001-of-00002.arrow"}]}))
    (folder / "dataset_info.json").write_text("{}")
    out["datasets"] = folder
    return out


def test_every_format_reads_the_same_documents(formats):
    expected, _ = read([formats["jsonl"]])
    assert [d.paragraphs for d in expected] == [
        ("Cats sit on mats. They purr.", "A new paragraph here."),
        ("Dogs run under rugs. They bark at cats.",),
        ("It rained all day. The big red dog was wet.",)]
    assert expected[0].source.endswith("r.jsonl:1 (id 7)")
    for name, path in formats.items():
        docs, stats = read([path])
        assert [d.paragraphs for d in docs] == [d.paragraphs for d in expected], name
        assert stats.documents == 3 and stats.empty_documents == 1, name
    parquet, _ = read([formats["parquet"]])
    assert parquet[2].source.endswith("r.parquet:row 4 (id 10)")
    assert {sniff_format(p) for n, p in formats.items() if n.startswith("jsonl")} == {"jsonl"}
    assert sniff_format(formats["parquet"]) == "parquet"


def test_a_missing_or_non_text_column_is_named(formats):
    with pytest.raises(BertkitError, match=r"no column 'text' \(its columns: id, title, body\)"):
        read([formats["parquet"]], fields=Fields())
    with pytest.raises(BertkitError, match="column 'id' holds int64, not text"):
        read([formats["arrow-file"]], fields=Fields("id"))
    with pytest.raises(BertkitError, match=r'r.jsonl:1: expected an object with a string "text"'):
        read([formats["jsonl"]], fields=Fields())


def test_damaged_columnar_and_compressed_files_are_clear_errors(tmp_path, formats):
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(formats["parquet"].read_bytes()[:100])
    with pytest.raises(BertkitError, match="cut.parquet: not a readable Parquet file"):
        read([cut])
    fake = tmp_path / "fake.jsonl.zst"
    fake.write_bytes(b"not zstd at all")
    with pytest.raises(BertkitError, match="fake.jsonl.zst: cannot read"):
        read([fake])


def test_pyarrow_missing_is_one_clear_line(formats, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_pyarrow(name, *args, **kwargs):
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    with pytest.raises(BertkitError, match=r"needs the pyarrow package \(pip install"):
        read([formats["parquet"]])


def test_wikiextractor_output(tmp_path):
    doc = tmp_path / "wiki_00"
    doc.write_text('<doc id="12" url="https://x/?curid=12" title="Anarchism">\nAnarchism\n\n'
                   "Anarchism is a political philosophy.\n\nIt has many schools.\n</doc>\n"
                   '<doc id="25" url="https://x/?curid=25" title="Autism">\nAutism\n\n'
                   "Autism is a condition.\n</doc>\n")
    assert sniff_format(doc) == "wikiextractor"
    docs, _ = read([doc], fields=Fields())
    assert [d.paragraphs for d in docs] == [
        ("Anarchism is a political philosophy.", "It has many schools."),
        ("Autism is a condition.",)]
    assert docs[1].source.endswith("wiki_00:8 (id 25)")
    bad = tmp_path / "wiki_01"
    bad.write_text('<doc id="1" title="T">\nT\n\ntext without an end\n')
    with pytest.raises(BertkitError, match=r"wiki_01:1: <doc> never closed"):
        read([bad], "wikiextractor", Fields())
    # WikiExtractor --json: JSONL with text and title
    js = write_jsonl(tmp_path / "wiki_02", [{"id": "3", "title": "T", "text": "Body text."}])
    assert sniff_format(js) == "jsonl" and read([js], fields=Fields())[0][0].paragraphs == (
        "Body text.",)


def test_prepare_gives_the_same_shards_from_parquet_datasets_and_jsonl(formats, tmp_path):
    """The CLI end to end: --text-field body on Parquet, a datasets folder and zstd JSONL gives
    byte for byte the shards of the same records as JSONL."""
    words = sorted({w.strip(".").lower() for r in RECORDS for w in r["body"].split()} - {""})
    tok = BertTokenizer({t: i for i, t in enumerate(
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", *words])})
    tok.save_pretrained(tmp_path / "tok")
    outs = {}
    for name in ("jsonl", "jsonl.zst", "parquet", "datasets"):
        outs[name] = tmp_path / f"out-{name}"
        assert main(["prepare", str(formats[name]), "--tokenizer", str(tmp_path / "tok"),
                     "--output", str(outs[name]), "--text-field", "body", "--max-seq-length",
                     "16", "--dupe-factor", "2", "--objective", "mlm", "--no-progress"]) == 0
    for name in ("jsonl.zst", "parquet", "datasets"):
        shard = sorted(p for p in outs[name].iterdir() if p.is_dir())[0]
        for array in shard.iterdir():
            assert filecmp.cmp(array, outs["jsonl"] / shard.name / array.name, shallow=False)


def test_vocab_train_counts_the_words_of_parquet_and_datasets_folders(formats, tmp_path):
    from bertkit.vocab.counting import count_files

    renamed = tmp_path / "text.parquet"  # vocab train reads the "text" column
    pq.write_table(table().rename_columns(["id", "title", "text"]), renamed)
    counts = count_files([renamed])
    assert counts["cats"] == 2 and counts["purr"] == 1 and counts["."] == 7
    assert main(["vocab", "train", str(renamed), "--vocab-size", "60", "--output",
                 str(tmp_path / "vocab"), "--no-progress"]) == 0
    assert {"cats", "dog", "the"} <= set((tmp_path / "vocab" / "vocab.txt").read_text().split())


def damage_page(path, group):
    """Overwrites 32 bytes in the middle of row group `group`'s column data with 0xFF (to snappy,
    a copy from before the start); the footer stays intact, so the file opens and its schema
    reads, and the damage shows only when the page is read."""
    column = pq.ParquetFile(path).metadata.row_group(group).column(0)
    data = bytearray(path.read_bytes())
    middle = column.data_page_offset + column.total_compressed_size // 2
    data[middle: middle + 32] = b"\xff" * 32
    path.write_bytes(bytes(data))


def test_a_damaged_parquet_page_names_the_file_and_row_group(tmp_path, capsys):
    path = tmp_path / "pages.parquet"
    texts = pa.table({"body": [f"Document {i} says something about cats. " * 5 for i in range(200)]})
    pq.write_table(texts, path, compression="snappy", use_dictionary=False, row_group_size=100)
    damage_page(path, 1)
    with pytest.raises(BertkitError, match=r"pages\.parquet: damaged Parquet data in row group 1 "
                       r"\(rows 101-200\): [^\n]+$"):  # the decoder's words, on one line
        read([path], fields=Fields("body"))
    # through the CLI, with vocab train's --text-field: one line naming the file, exit 1
    assert main(["vocab", "train", str(path), "--text-field", "body", "--vocab-size", "60",
                 "--output", str(tmp_path / "vocab"), "--no-progress"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("bertkit: error:") and "\n" not in err
    assert "pages.parquet: damaged Parquet data in row group 1" in err
    # pages with a CRC (parquet-mr writes one) are checked: without compression a flipped byte
    # would otherwise be read as other text
    plain = tmp_path / "crc.parquet"
    pq.write_table(texts, plain, compression="none", use_dictionary=False, row_group_size=100,
                   write_page_checksum=True)
    damage_page(plain, 0)
    with pytest.raises(BertkitError, match=r"crc\.parquet: damaged Parquet data in row group 0 "
                       r"\(rows 1-100\): .*CRC"):
        read([plain], fields=Fields("body"))


def test_a_datasetdict_folder_is_refused_with_the_split_to_pass(formats, tmp_path):
    """`DatasetDict.save_to_disk` writes dataset_dict.json and a `Dataset` folder per split."""
    import shutil

    folder = tmp_path / "dict"
    folder.mkdir()
    (folder / "dataset_dict.json").write_text(json.dumps({"splits": ["test", "train"]}))
    for split in ("test", "train"):
        shutil.copytree(formats["datasets"], folder / split)
    with pytest.raises(BertkitError, match=rf"dict: a `datasets` DatasetDict folder \(splits: "
                       rf"test, train\); pass the split to read, e.g. {folder / 'train'}$"):
        read([folder])
    docs, _ = read([folder / "train"])
    assert [d.paragraphs for d in docs] == [d.paragraphs for d in read([formats["jsonl"]])[0]]
