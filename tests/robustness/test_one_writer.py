"""The commands whose folder has no run marker of their own (a data set's download, an ablation,
the demo) claim it as the run kinds do: while another process writes it, they refuse in one
line naming that process, before any work; with the folder free they run and leave no lock."""

from __future__ import annotations

from pathlib import Path

import pytest

from bertkit.data.download import Dataset, RemoteFile, download_dataset
from bertkit.errors import BertkitError
from bertkit.io import LOCK_FILE, held_output_dir
from bertkit.studies.ablate import AblationConfig, run_ablation
from bertkit.studies.demo.run import DemoConfig
from bertkit.studies.demo.run import run as run_demo
from tests.helpers import held_elsewhere

HELD = "another process is writing this folder"


def test_a_download_into_a_folder_another_process_writes_is_refused(tmp_path):
    source = tmp_path / "data.txt"
    source.write_bytes(b"some text\n")
    ds = Dataset("toy", "a toy set", (RemoteFile(source.as_uri(), "raw/data.txt"),))
    folder = tmp_path / "data" / "toy"
    folder.mkdir(parents=True)
    with held_elsewhere(folder), pytest.raises(BertkitError, match=HELD):
        download_dataset(ds, tmp_path / "data", progress=False)
    assert not (folder / "raw").exists()
    assert download_dataset(ds, tmp_path / "data", progress=False) == folder
    assert (folder / "raw" / "data.txt").read_bytes() == b"some text\n"
    assert not (folder / LOCK_FILE).exists()


def test_an_ablation_or_a_demo_into_a_folder_another_process_writes_is_refused(tmp_path,
                                                                             shared_data):
    corpus = str(shared_data / "books" / "carroll-alice.txt")
    out = tmp_path / "ablation"
    out.mkdir()
    with held_elsewhere(out), pytest.raises(BertkitError, match=HELD):
        run_ablation(AblationConfig(str(out), (corpus,), str(shared_data)))
    assert not (out / "results.json").exists()  # nothing of the study written
    demo = tmp_path / "demo"
    demo.mkdir()
    with held_elsewhere(demo), pytest.raises(BertkitError, match=HELD):
        run_demo(DemoConfig(shared_data, output=demo, corpus=(corpus,)))
    assert not (demo / "work").exists()


def test_a_held_folder_is_given_up_after_the_block_unless_held_before(tmp_path):
    folder = tmp_path / "f"
    with held_output_dir(folder):
        assert (folder / LOCK_FILE).is_file()
        with held_output_dir(folder):
            pass
        assert (folder / LOCK_FILE).is_file()  # the outer block still holds it
    assert not (folder / LOCK_FILE).exists()


def test_a_study_folder_left_by_a_killed_run_holds_only_a_stale_lock(tmp_path):
    out = tmp_path / "ablation"
    out.mkdir()
    (out / LOCK_FILE).write_text("pid 1 on elsewhere since then\n")  # its holder is gone
    cfg = AblationConfig(str(out), (str(Path("missing.txt")),), str(tmp_path), tasks=())
    with pytest.raises(Exception) as err:
        run_ablation(cfg)
    assert "not an ablation folder" not in str(err.value)
