import pytest

from bertkit.errors import BertkitError
from bertkit.model import BertModel
from bertkit.studies.probe import drift_table, layer_drift
from bertkit.tokenization import BertTokenizer


@pytest.fixture(scope="module")
def minilm(minilm_path):
    return BertModel.from_pretrained(minilm_path), BertTokenizer.from_pretrained(minilm_path)


def test_bank_senses_drift_apart(minilm):
    rows = layer_drift(*minilm, "bank", "I deposited money at the bank",
                       "we sat on the bank of the river", "she opened an account at the bank downtown")
    assert len(rows) == 7 and rows[0].layer == 0
    assert rows[0].cosine > 0.95  # embeddings: same word, only the position differs
    assert rows[-1].cosine < rows[0].cosine - 0.1  # context separates the senses...
    assert all(r.control > r.cosine for r in rows[1:])  # ...more than context of the same sense
    assert "layer 6" in drift_table(rows)


def test_missing_word_is_a_clear_error(minilm):
    with pytest.raises(BertkitError, match="does not occur"):
        layer_drift(*minilm, "bank", "no such word", "here either")

