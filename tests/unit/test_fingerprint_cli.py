"""`infercache fingerprint` subcommand: output formats and exit codes."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from infercache_client.fingerprint import fingerprint

from sidecar.cli.fingerprint import add_parser
from tests.support.checkpoints import llama_tensors, lora_tensors, write_adapter, write_model

REPO = Path(__file__).resolve().parents[2]


def cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="infercache")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["fingerprint", *argv])
    rc: int = args.func(args)
    return rc


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("cli") / "m", llama_tensors(layers=2), shards=2)


def test_path_prints_the_fingerprint(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`fingerprint PATH` prints the fp1 value alone and exits 0."""
    assert cli(str(model)) == 0
    assert capsys.readouterr().out.strip() == fingerprint(model).value


def test_json_output_lists_components(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--json --mode full --cache-file F` prints the components and writes the memo file."""
    memo = tmp_path / "memo.json"
    assert cli(str(model), "--mode", "full", "--json", "--cache-file", str(memo)) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["fingerprint"] == fingerprint(model, mode="full").value
    assert set(doc["components"]) == {
        "config",
        "generation_config",
        "tokenizer",
        "weights",
        "serving",
    }
    assert doc["components"]["serving"] == "absent"
    assert memo.exists()


def test_no_cache_leaves_default_location_alone(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--no-cache rehashes without writing the default memo file."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cli(str(model), "--mode", "full", "--no-cache") == 0
    assert not (tmp_path / "infercache").exists()
    assert cli(str(model), "--mode", "full") == 0
    assert (tmp_path / "infercache" / "fingerprints.json").exists()


def test_diff_names_changed_components(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--diff A B` names the components that differ, as text and as JSON."""
    other = Path(shutil.copytree(model, tmp_path / "other"))
    (other / "chat_template.jinja").write_text("{{ messages }}")
    assert cli("--diff", str(model), str(other)) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "changed: tokenizer"
    assert cli("--diff", str(model), str(model), "--json") == 0
    assert json.loads(capsys.readouterr().out)["changed"] == []


def test_adapter_directory_is_detected(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A directory with adapter_config.json and no config.json is fingerprinted as an adapter."""
    root = write_adapter(tmp_path / "lora", lora_tensors())
    assert cli(str(root), "--json") == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "adapter"


@pytest.mark.parametrize("case", ["missing_dir", "malformed_header", "no_config", "path_and_diff"])
def test_bad_input_exits_2_with_one_line(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    """Bad input exits 2 with a single clear line on stderr and nothing on stdout."""
    target = Path(shutil.copytree(model, tmp_path / "m"))
    argv = [str(target)]
    if case == "missing_dir":
        argv = [str(tmp_path / "nope")]
    elif case == "malformed_header":
        next(target.glob("*.safetensors")).write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{oops")
    elif case == "no_config":
        (target / "config.json").unlink()
    else:
        argv = [str(target), "--diff", str(target), str(target)]
    assert cli(*argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("infercache fingerprint: error: ")


def test_runs_as_a_subprocess(model: Path) -> None:
    """A real interpreter invocation prints the value and exits 0; a bad path exits 2."""
    code = (
        "import argparse, sys; from sidecar.cli.fingerprint import add_parser; "
        "p = argparse.ArgumentParser(prog='infercache'); add_parser(p.add_subparsers()); "
        "a = p.parse_args(sys.argv[1:]); sys.exit(a.func(a))"
    )
    # The checkout's client too: the fingerprint package ships in its distribution.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "clients/python")])}
    ok = subprocess.run(
        [sys.executable, "-c", code, "fingerprint", str(model)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert (ok.returncode, ok.stdout.strip()) == (0, fingerprint(model).value)
    bad = subprocess.run(
        [sys.executable, "-c", code, "fingerprint", str(model / "missing")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert bad.returncode == 2
    assert "not a directory" in bad.stderr
