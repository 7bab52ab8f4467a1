import json

import pytest

from bertkit.cli.main import main
from bertkit.config import BertConfig
from bertkit.errors import BertkitError
from bertkit.heads import BertForSequenceClassification


def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    assert "info" in capsys.readouterr().out


def test_info_on_minilm(minilm_path, capsys):
    assert main(["info", str(minilm_path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["layers"] == 6 and info["hidden"] == 384 and info["vocab_file_entries"] == 30522
    assert info["parameters"] == 22_713_216


def test_info_on_a_classifier(tmp_path, capsys):
    config = BertConfig.preset("tiny", vocab_size=40, id2label={0: "neg", 1: "pos"})
    BertForSequenceClassification(config).save_pretrained(tmp_path)
    assert main(["info", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "classifier" in out and "BertForSequenceClassification" in out and "'pos'" in out


def test_info_errors_are_one_line(tmp_path, capsys):
    assert main(["info", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no config.json" in err and "Traceback" not in err
    with pytest.raises(BertkitError):  # --debug shows the real exception
        main(["--debug", "info", str(tmp_path)])
