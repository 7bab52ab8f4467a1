"""GLUE readers on the real files (exact counts, quirks) and on crafted bad input."""

from __future__ import annotations

import collections

import pytest

from bertkit.errors import BertkitError
from bertkit.tasks import get_task
from bertkit.tasks.base import FeatureSettings

DEV_COUNTS = {
    # task: (rows, label counts)
    "sst2": (872, {"1": 444, "0": 428}),
    "mrpc": (408, {"1": 279, "0": 129}),
    "cola": (1043, {"1": 721, "0": 322}),
    "rte": (277, {"entailment": 146, "not_entailment": 131}),
    "qnli": (5463, {"entailment": 2702, "not_entailment": 2761}),
    "wnli": (71, {"0": 40, "1": 31}),
}


@pytest.mark.parametrize("name", sorted(DEV_COUNTS))
def test_dev_counts_and_labels(shared_data, name):
    task = get_task(name)
    examples = task.read(task.find_file(shared_data / "glue", "dev"))
    rows, labels = DEV_COUNTS[name]
    assert len(examples) == rows
    assert dict(collections.Counter(e.label for e in examples)) == labels
    assert all(e.text_a for e in examples)
    assert all((e.text_b is None) == (name in ("sst2", "cola")) for e in examples)


def test_quirks_bom_no_header_unbalanced_quotes(shared_data):
    mrpc = get_task("mrpc")
    dev = mrpc.read(shared_data / "glue" / "MRPC" / "dev.tsv")  # UTF-8 BOM before the header
    assert dev[0].label == "1" and dev[0].text_b.startswith('"The foodservice pie business')
    assert len(mrpc.read(shared_data / "glue" / "MRPC" / "train.tsv")) == 3668
    cola = get_task("cola")  # no header row: the first line is an example
    first = cola.read(shared_data / "glue" / "CoLA" / "dev.tsv")[0]
    assert first.text_a == "The sailors rode the breeze clear of the rocks."
    assert len(cola.read(shared_data / "glue" / "CoLA" / "train.tsv")) == 8551
    rte = get_task("rte")
    assert len(rte.read(shared_data / "glue" / "RTE" / "train.tsv")) == 2490


def test_stsb_scores_and_unlabeled_test(shared_data):
    stsb = get_task("stsb")
    dev = stsb.read(shared_data / "glue" / "STS-B" / "dev.tsv")
    assert len(dev) == 1500
    assert dev[0].label == 5.0 and all(0.0 <= e.label <= 5.0 for e in dev)
    assert stsb.discover_labels(dev) is None
    test = get_task("sst2").read(shared_data / "glue" / "SST-2" / "test.tsv")
    assert len(test) == 1821 and all(e.label is None for e in test)
    assert test[0].guid == "0"


def test_missing_column_names_file_and_line(tmp_path):
    path = tmp_path / "dev.tsv"
    path.write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\tonly one\n")
    with pytest.raises(BertkitError, match=r"dev\.tsv:3: expected 4 tab-separated columns"):
        get_task("rte").read(path)
    path.write_text("index\tsentence1\tlabel\n0\ta\tentailment\n")
    with pytest.raises(BertkitError, match=r"dev\.tsv:1: missing column 'sentence2'"):
        get_task("rte").read(path)


def test_bytes_that_are_not_utf8_name_file_and_line(tmp_path):
    path = tmp_path / "dev.tsv"
    path.write_bytes(b"sentence\tlabel\ngood\t1\nbad \xe9 film\t0\n")  # a Latin-1 byte
    with pytest.raises(BertkitError, match=r"dev\.tsv, line 3: not valid UTF-8 \(byte 0xe9\)"):
        get_task("sst2").read(path)


def test_unknown_label_in_dev_names_file_and_line(tmp_path, minilm_path):
    from bertkit.tokenization.wordpiece import BertTokenizer

    path = tmp_path / "dev.tsv"
    path.write_text("sentence\tlabel\ngood\t1\nbad\t2\n")
    task = get_task("sst2")
    examples = task.read(path)
    tokenizer = BertTokenizer.from_pretrained(minilm_path)
    with pytest.raises(BertkitError, match=r"dev\.tsv:3: unknown label '2'"):
        task.featurize(examples, tokenizer, FeatureSettings(), {"0": 0, "1": 1}, train=False)


def test_non_numeric_score(tmp_path):
    path = tmp_path / "dev.tsv"
    path.write_text("sentence1\tsentence2\tscore\na\tb\thigh\n")
    with pytest.raises(BertkitError, match=r"dev\.tsv:2: expected a numeric score"):
        get_task("stsb").read(path)


def test_mnli_has_matched_and_mismatched_dev():
    task = get_task("mnli")
    assert task.eval_splits() == {"dev_matched": "", "dev_mismatched": "_mismatched"}
    assert task.labels == ["contradiction", "entailment", "neutral"]
