"""`bertkit serve` on the command line: settings reach the server, bad input is one line, and
without the serve extra it says how to install it (the server itself is tested in tests/serve)."""

from __future__ import annotations

import importlib.util

import pytest

from bertkit.cli.main import main

pytest.importorskip("fastapi", reason="bertkit serve needs the serve extra")


def test_serve_loads_models_then_runs_uvicorn_on_loopback(monkeypatch, minilm_path):
    import bertkit.serve.server as server

    seen = {}

    class Server:  # uvicorn.Server, recording its settings instead of opening the port
        def __init__(self, config):
            seen["config"] = config

        def run(self):
            seen["ran"] = True

    monkeypatch.setattr(server.uvicorn, "Server", Server)
    assert main(["serve", str(minilm_path), "--port", "8123", "--max-batch", "4",
                 "--body-timeout", "3"]) == 0
    config = seen["config"]
    assert seen["ran"] and config.host == "127.0.0.1" and config.port == 8123
    assert config.http.__name__ == "HeaderDeadline"  # the header deadline is what uvicorn runs
    paths = {route.path for route in config.app.routes}
    assert {"/", "/health", "/models", "/embed", "/predict", "/attention", "/layers"} <= paths


def test_serve_bad_input_is_one_line(tmp_path, capsys):
    assert main(["serve", str(tmp_path / "missing")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("bertkit: error:") and "not a model directory" in err and "\n" not in err
    assert main(["serve", str(tmp_path), "--port", "70000"]) == 1
    assert "--port must be in 0..65535" in capsys.readouterr().err


def test_serve_without_the_extra_says_how_to_install(monkeypatch, tmp_path, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("fastapi", "uvicorn") else real(name, *a))
    assert main(["serve", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err == "bertkit: error: bertkit serve needs fastapi and uvicorn: pip install 'bertkit[serve]'"
