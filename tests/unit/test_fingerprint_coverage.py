"""Files a server reads besides the usual ones, and the serving options an operator
declares, are fingerprint components too."""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from infercache_client.fingerprint import ABSENT, Fingerprint, diff, fingerprint
from infercache_client.fingerprint.weights import Mode
from safetensors.numpy import save_file

from sidecar.cli.fingerprint import add_parser
from tests.support.checkpoints import (
    backdate,
    llama_tensors,
    lora_tensors,
    write_adapter,
    write_model,
)

MODES: tuple[Mode, ...] = ("fast", "full")


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two shards with an index (the HF layout Mistral repos ship beside their own)."""
    return write_model(tmp_path_factory.mktemp("cov") / "model", llama_tensors(), shards=2)


def _consolidated(root: Path) -> None:
    rng = np.random.default_rng(7)
    save_file(
        {"layers.0.attention.wq.weight": rng.standard_normal((8, 8)).astype(np.float32)},
        str(root / "consolidated.safetensors"),
    )


@pytest.mark.parametrize(
    ("component", "mutate"),
    [
        ("tokenizer", lambda d: (d / "tekken.json").write_text(json.dumps({"vocab": []}))),
        ("tokenizer", lambda d: (d / "tokenizer.model.v3").write_bytes(b"\x0a\x03abc")),
        ("config", lambda d: (d / "params.json").write_text(json.dumps({"dim": 64}))),
        ("config", lambda d: (d / "quantize_config.json").write_text(json.dumps({"bits": 4}))),
        ("weights", _consolidated),
    ],
    ids=["tekken", "tokenizer_model_v", "params", "quantize_config", "consolidated"],
)
def test_added_file_changes_its_component(
    base: Path, tmp_path: Path, component: str, mutate: Callable[[Path], object]
) -> None:
    """tekken.json, tokenizer.model.v*, params.json, quantize_config.json and a
    consolidated.safetensors beside an index each change exactly their component."""
    before = {m: fingerprint(base, mode=m) for m in MODES}
    copy = Path(shutil.copytree(base, tmp_path / "m"))
    mutate(copy)
    backdate(copy)
    for mode in MODES:
        assert diff(before[mode], fingerprint(copy, mode=mode)) == (component,)


def test_consolidated_weights_edits_are_seen(base: Path, tmp_path: Path) -> None:
    """Two consolidated files that differ give two fingerprints (the digest reads them)."""
    a = Path(shutil.copytree(base, tmp_path / "a"))
    b = Path(shutil.copytree(base, tmp_path / "b"))
    _consolidated(a)
    save_file(
        {"layers.0.attention.wq.weight": np.zeros((8, 8), np.float32)},
        str(b / "consolidated.safetensors"),
    )
    assert diff(fingerprint(a, mode="full"), fingerprint(b, mode="full")) == ("weights",)


def test_adapter_new_embeddings_are_weights(tmp_path: Path) -> None:
    """A LoRA adapter's new_embeddings.safetensors (added tokens) is part of its weights."""
    plain = write_adapter(tmp_path / "a", lora_tensors())
    with_new = write_adapter(tmp_path / "b", lora_tensors())
    rng = np.random.default_rng(3)
    save_file(
        {"base_model.model.embed_tokens": rng.standard_normal((2, 64)).astype(np.float32)},
        str(with_new / "new_embeddings.safetensors"),
    )
    backdate(with_new)
    for mode in MODES:
        a = fingerprint(plain, kind="adapter", mode=mode)
        b = fingerprint(with_new, kind="adapter", mode=mode)
        assert diff(a, b) == ("weights",)
        assert b.tensors == a.tensors + 1


def test_declared_serving_options_are_a_component(base: Path, tmp_path: Path) -> None:
    """Identical files served with another --dtype or --max-model-len get another
    fingerprint, named `serving` by diff; declaring none keeps the old value."""
    plain = fingerprint(base)
    a = fingerprint(base, serving={"--dtype": "bfloat16", "--max-model-len": 8192})
    b = fingerprint(base, serving={"--max-model-len": 8192, "--dtype": "float16"})
    reordered = fingerprint(base, serving={"--max-model-len": 8192, "--dtype": "bfloat16"})
    assert a.serving != ABSENT
    assert plain.serving == ABSENT
    assert diff(plain, a) == ("serving",)
    assert diff(a, b) == ("serving",)
    assert reordered == a
    assert Fingerprint.from_json(a.to_json()) == a
    assert Fingerprint.from_json(plain.to_json()) == plain


def cli_main(argv: list[str]) -> int:
    """Run `infercache <argv>` in process; its exit status."""
    parser = argparse.ArgumentParser(prog="infercache")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    rc: int = args.func(args)
    return rc


def test_cli_diff_shows_the_serving_component(
    base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`infercache fingerprint --diff A A --serving-config SA SB --json` names `serving`;
    a serving file that is not a JSON object is a one-line error, exit 2."""
    sa, sb, bad = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "bad.json"
    sa.write_text(json.dumps({"--dtype": "bfloat16"}))
    sb.write_text(json.dumps({"--dtype": "bfloat16", "--quantization": "fp8"}))
    bad.write_text("[1, 2]")
    args = ["fingerprint", "--diff", str(base), str(base), "--json", "--no-cache"]
    assert cli_main([*args, "--serving-config", str(sa), str(sb)]) == 0
    assert json.loads(capsys.readouterr().out)["changed"] == ["serving"]
    assert cli_main([*args, "--serving-config", str(sa), str(sa)]) == 0
    assert json.loads(capsys.readouterr().out)["changed"] == []
    assert cli_main([*args, "--serving-config", str(sa)]) == 2
    assert cli_main(["fingerprint", str(base), "--serving-config", str(bad)]) == 2
    assert "bad.json" in capsys.readouterr().err
