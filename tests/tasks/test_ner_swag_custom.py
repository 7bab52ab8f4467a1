"""CoNLL-2003, SWAG and custom-data readers: real counts, label alignment, bad input."""

from __future__ import annotations

import collections
import json

import pytest

from bertkit.errors import BertkitError
from bertkit.metrics import entity_spans
from bertkit.tasks import ColumnSpec, get_task
from bertkit.tasks.base import FeatureSettings


@pytest.fixture(scope="module")
def tokenizer(minilm_path):
    from bertkit.tokenization.wordpiece import BertTokenizer

    return BertTokenizer.from_pretrained(minilm_path)


def to_iob1(tags):
    """IOB2 -> IOB1: B- only where a chunk directly follows one of the same type."""
    out = []
    for i, tag in enumerate(tags):
        if tag.startswith("B-") and not (i and tags[i - 1][2:] == tag[2:] and tags[i - 1] != "O"):
            tag = "I-" + tag[2:]
        out.append(tag)
    return out


def test_conll_valid_counts_and_entities(shared_data):
    task = get_task("conll2003")
    valid = task.read(task.find_file(shared_data / "conll2003", "dev"))
    assert len(valid) == 3250
    assert sum(len(s.words) for s in valid) == 51362
    kinds = collections.Counter(k for s in valid for k, _, _ in entity_spans(s.tags))
    assert kinds == {"PER": 1842, "LOC": 1837, "ORG": 1341, "MISC": 922}
    # The same entities come out of the IOB1 encoding of the file (conlleval reads both).
    assert all(entity_spans(to_iob1(list(s.tags))) == entity_spans(s.tags) for s in valid)
    assert task.discover_labels(valid) == ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG",
                                           "I-ORG", "B-PER", "I-PER"]


def test_ner_label_on_first_wordpiece_only(tmp_path, tokenizer):
    path = tmp_path / "train.txt"
    path.write_text("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n"
                    "Schwarzenegger NNP B-NP B-PER\n\nPeter NNP B-NP B-PER\n")
    task = get_task("conll2003")
    sentences = task.read(path)
    assert [s.words for s in sentences] == [("EU", "rejects", "Schwarzenegger"), ("Peter",)]
    labels = task.discover_labels(sentences)
    label2id = {t: i for i, t in enumerate(labels)}
    feature = task.featurize(sentences, tokenizer, FeatureSettings(), label2id, train=True)[0]
    pieces = [tokenizer.tokenize(w) for w in sentences[0].words]
    assert len(pieces[2]) > 1  # "Schwarzenegger" is several WordPieces
    expected = [-100]
    for word_pieces, tag in zip(pieces, ["B-ORG", "O", "B-PER"]):
        expected += [label2id[tag]] + [-100] * (len(word_pieces) - 1)
    assert feature["labels"] == expected + [-100]
    assert feature["word_starts"] == [1, 1 + len(pieces[0]), 1 + len(pieces[0]) + len(pieces[1])]


def test_ner_bad_input(tmp_path, tokenizer):
    path = tmp_path / "dev.txt"
    path.write_text("EU NNP B-NP B-ORG\nrejects\n")
    with pytest.raises(BertkitError, match=r"dev\.txt:2: expected 'word \.\.\. tag'"):
        get_task("conll2003").read(path)
    path.write_text("EU NNP B-NP ORGANIZATION\n")
    with pytest.raises(BertkitError, match=r"dev\.txt:1: 'ORGANIZATION' is not an IOB tag"):
        get_task("conll2003").read(path)
    path.write_text("EU NNP B-NP B-ORG\n\nParis NNP B-NP B-LOC\n")
    task = get_task("conll2003")
    with pytest.raises(BertkitError, match=r"dev\.txt:3: unknown label 'B-LOC'"):
        task.featurize(task.read(path), tokenizer, FeatureSettings(), {"O": 0, "B-ORG": 1},
                       train=False)


def test_swag_sample(shared_data, tokenizer):
    task = get_task("swag")
    examples = task.read(shared_data / "swag" / "val_sample_11rows.csv")
    assert len(examples) == 11
    assert all(len(e.endings) == 4 and e.label in range(4) for e in examples)
    features = task.featurize(examples, tokenizer, FeatureSettings(max_seq_length=64), None,
                              train=True)
    batch = task.collate(features[:3])
    assert batch["input_ids"].shape[:2] == (3, 4) and batch["labels"].shape == (3,)


def test_swag_bad_label(tmp_path):
    path = tmp_path / "val.csv"
    path.write_text("sent1,sent2,ending0,ending1,ending2,ending3,label\na,b,c,d,e,f,7\n")
    with pytest.raises(BertkitError, match=r"val\.csv:2: label '7'"):
        get_task("swag").read(path)


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl"])
def test_custom_formats_and_discovered_labels(tmp_path, suffix):
    rows = [{"review": "great", "stars": "10"}, {"review": "poor, sadly", "stars": "2"},
            {"review": "fine", "stars": "2"}]
    path = tmp_path / f"train{suffix}"
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif suffix == ".csv":
        path.write_text('review,stars\ngreat,10\n"poor, sadly",2\nfine,2\n')
    else:
        path.write_text("review\tstars\ngreat\t10\npoor, sadly\t2\nfine\t2\n")
    task = get_task("custom", ColumnSpec(text="review", label="stars"))
    assert task.find_file(tmp_path, "train") == path
    examples = task.read(path)
    assert [e.text_a for e in examples] == ["great", "poor, sadly", "fine"]
    assert task.discover_labels(examples) == ["2", "10"]  # numeric order, not "10" < "2"


def test_custom_missing_column_and_regression(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"text": "a", "label": 1}\n{"txt": "b", "label": 0}\n')
    with pytest.raises(BertkitError, match=r"train\.jsonl:2: missing column 'text'"):
        get_task("custom").read(path)
    path.write_text('{"text": "a", "label": "x"}\n')
    with pytest.raises(BertkitError, match=r"train\.jsonl:1: expected a numeric 'label'"):
        get_task("custom", ColumnSpec(regression=True)).read(path)


def test_predict_inputs_plain_text_and_jsonl(tmp_path):
    from bertkit.tasks.inputs import read_input

    path = tmp_path / "in.txt"
    path.write_text("EU rejects German call\n\nPeter Blackburn\n")
    sentences = read_input(get_task("conll2003"), path)
    assert [s.words for s in sentences] == [("EU", "rejects", "German", "call"),
                                            ("Peter", "Blackburn")]
    assert get_task("conll2003").output_record(sentences[1], ["B-PER", "I-PER"]) == {
        "id": "1", "words": ["Peter", "Blackburn"], "tags": ["B-PER", "I-PER"]}
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": "q", "text": "a", "pair": "b"}\n{"pair": "no text"}\n')
    with pytest.raises(BertkitError, match=r"in\.jsonl:2: expected a field 'text' or"):
        read_input(get_task("rte"), path)
