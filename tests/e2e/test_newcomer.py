"""What a new user runs into, tried as they would: the README's commands on a real
`infercache serve`, the admin CLI's address and token mistakes, help texts, switches,
and a port already in use."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest
from infercache.v1 import cache_pb2 as pb
from infercache_client import CacheClient

from sidecar.cli.main import build_parser
from tests.support.readme import DOCUMENTED_ADDRESS, readme_example, run_example
from tests.support.sidecars import INFERCACHE, SidecarProcess, clean_env

pytestmark = pytest.mark.e2e

README = Path(__file__).resolve().parents[2] / "README.md"
DOCUMENTED_ADMIN = "127.0.0.1:50052"


@dataclass
class Readme:
    """The README's invalidation walk-through: server setting, CLI token, command line."""

    server_tokens: str
    cli_token: str
    invalidate: list[str]


def readme_walkthrough() -> Readme:
    """Parse the token lines and the `infercache invalidate` line of README.md."""
    text = README.read_text(encoding="utf-8")
    server = re.search(r"INFERCACHE_ADMIN_TOKENS=(\S+) make run", text)
    cli = re.search(r"export INFERCACHE_ADMIN_TOKEN=(\S+)", text)
    line = re.search(r"^\s+\.venv/bin/infercache (invalidate .*)$", text, re.MULTILINE)
    assert server, "README no longer starts the sidecar with INFERCACHE_ADMIN_TOKENS"
    assert cli, "README no longer exports INFERCACHE_ADMIN_TOKEN"
    assert line, "README no longer shows an `infercache invalidate` command"
    return Readme(server.group(1), cli.group(1), shlex.split(line.group(1)))


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """`infercache serve` with the README's admin token setting: (data, admin) addresses."""
    proc = SidecarProcess(
        operator=True,
        admin=True,
        log_path=tmp_path / "serve.stderr",
        env={"INFERCACHE_ADMIN_TOKENS": readme_walkthrough().server_tokens},
    )
    try:
        proc.wait_ready()
        yield proc.target, proc.admin_target
    finally:
        proc.stop()


def cli(*args: str, token: str | None) -> subprocess.CompletedProcess[str]:
    """`infercache ARGS` with INFERCACHE_ADMIN_TOKEN set to `token` (unset with None)."""
    env = clean_env() if token is None else clean_env(INFERCACHE_ADMIN_TOKEN=token)
    return subprocess.run(
        [str(INFERCACHE), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_readme_invalidation_drops_what_the_python_example_stored(
    sidecar: tuple[str, str],
) -> None:
    """Following the README as written: the Python example stores, the documented
    invalidate command matches that entry (no "nothing matched" note), and the next
    lookup misses."""
    data, admin = sidecar
    walk = readme_walkthrough()
    stored = run_example(readme_example().replace(DOCUMENTED_ADDRESS, data))
    with CacheClient(data) as client:
        assert client.lookup(stored["key"]).outcome == pb.LOOKUP_OUTCOME_HIT
    args = [a.replace(DOCUMENTED_ADMIN, admin) for a in walk.invalidate]
    done = cli(*args, token=walk.cli_token)
    assert done.returncode == 0, done.stderr
    assert "~1 entries" in done.stdout
    assert "no stored entry matched" not in done.stderr
    with CacheClient(data) as client:
        assert client.lookup(stored["key"]).outcome == pb.LOOKUP_OUTCOME_MISS


def test_nothing_matched_is_pointed_out(sidecar: tuple[str, str]) -> None:
    """A selector that matches no stored entry is confirmed, with a note saying why it
    may have missed (a fingerprint prefix is not the fingerprint)."""
    _, admin = sidecar
    done = cli(
        "invalidate", "--admin", admin, "--model-version", "fp1-3f9a", "--reason", "r",
        token=readme_walkthrough().cli_token,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "~0 entries" in done.stdout
    assert "no stored entry matched" in done.stderr


def test_server_style_token_pair_gets_a_hint(sidecar: tuple[str, str]) -> None:
    """Giving the CLI the server's NAME=TOKEN pair fails UNAUTHENTICATED and says that
    the CLI takes the token alone."""
    _, admin = sidecar
    done = cli("audit", "--admin", admin, token=readme_walkthrough().server_tokens)
    assert done.returncode == 1
    assert "UNAUTHENTICATED" in done.stderr
    assert "the CLI takes the token alone" in done.stderr


@pytest.mark.parametrize("given", ["localhost", "127.0.0.1", "https://127.0.0.1:50052", ":50052"])
def test_admin_address_without_a_port_or_with_tls_is_a_usage_error(given: str) -> None:
    """No silent port 443: a missing port or an https URL is exit 2 naming HOST:PORT."""
    done = cli("audit", "--admin", given, token="x" * 20)
    assert done.returncode == 2
    assert "HOST:PORT" in done.stderr


def test_admin_address_as_http_url_works(sidecar: tuple[str, str]) -> None:
    """http://HOST:PORT is accepted (the admin plane is plaintext gRPC)."""
    _, admin = sidecar
    done = cli("audit", "--admin", f"http://{admin}/", token=readme_walkthrough().cli_token)
    assert done.returncode == 0, done.stderr


def test_data_plane_port_as_admin_gets_a_hint(sidecar: tuple[str, str]) -> None:
    """The data-plane port given as --admin: UNIMPLEMENTED, and a hint naming the cause."""
    data, _ = sidecar
    done = cli("audit", "--admin", data, token=readme_walkthrough().cli_token)
    assert done.returncode == 1
    assert "UNIMPLEMENTED" in done.stderr
    assert "data-plane port" in done.stderr


def test_audit_json_numbers_are_numbers(sidecar: tuple[str, str]) -> None:
    """audit --json prints epochs, times and counts as JSON numbers, like stats --json."""
    _, admin = sidecar
    token = readme_walkthrough().cli_token
    made = cli("invalidate", "--admin", admin, "--tenant", "t", "--reason", "r", token=token)
    assert made.returncode == 0, made.stderr
    done = cli("audit", "--admin", admin, "--json", token=token)
    [record] = [json.loads(line) for line in done.stdout.splitlines()]
    for name in ("epoch", "time_ms", "estimated_entries"):
        assert isinstance(record[name], int), (name, record[name])
    stats = json.loads(cli("stats", "--admin", admin, "--json", token=token).stdout)
    assert isinstance(stats["epoch"], int)
    assert record["epoch"] == stats["epoch"]


def _options_without_help(help_text: str) -> list[str]:
    """Option lines of an argparse --help whose description is empty."""
    lines = help_text.split("options:", 1)[1].splitlines()
    bare = []
    for i, line in enumerate(lines):
        m = re.match(r"^  (-[-\w]+.*?)(\s{2,}\S.*)?$", line)
        if not m or m.group(2):
            continue
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if not re.match(r"^\s{10,}\S", following):
            bare.append(m.group(1))
    return bare


def test_every_invalidate_option_has_help() -> None:
    """Each selector flag of `invalidate --help` says what it selects."""
    done = cli("invalidate", "--help", token=None)
    assert done.returncode == 0
    assert _options_without_help(done.stdout) == []
    assert "whole" in done.stdout  # --model-version says it takes the whole fingerprint


def test_fingerprint_usage_names_every_option() -> None:
    """The usage line of `fingerprint --help` includes --no-cache and --threads."""
    usage = cli("fingerprint", "--help", token=None).stdout.split("\n\n", 1)[0]
    for option in ("--mode", "--json", "--cache-file", "--no-cache", "--threads", "--diff"):
        assert option in usage, option


@pytest.mark.parametrize(
    ("argv", "value"),
    [
        (["--uvloop"], "true"),
        (["--no-uvloop"], "false"),
        (["--uvloop", "false"], "false"),
        (["--no-kv-enabled"], "false"),
        ([], None),
    ],
)
def test_boolean_settings_are_switches(argv: list[str], value: str | None) -> None:
    """`--flag` turns a boolean setting on, `--no-flag` off; a value is still accepted."""
    args = build_parser().parse_args(["serve", *argv])
    name = (argv[0].removeprefix("--no-").removeprefix("--") if argv else "uvloop").replace(
        "-", "_"
    )
    assert getattr(args, name) == value


def test_port_in_use_is_one_clear_line(tmp_path: Path) -> None:
    """A second sidecar on a taken port exits 1 with one line naming the address,
    without gRPC's own C-core error line."""
    first = SidecarProcess(operator=True, log_path=tmp_path / "serve.stderr")
    try:
        first.wait_ready()
        data = first.target
        second = subprocess.run(
            [
                str(INFERCACHE),
                "serve",
                "--listen",
                data,
                "--admin-listen",
                "",
                "--metrics-listen",
                "",
            ],
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        first.stop()
    assert second.returncode == 1
    lines = [line for line in second.stderr.splitlines() if line.strip()]
    assert lines == [
        f"infercache: INFERCACHE_LISTEN: cannot listen on {data}: Address already in use"
    ], lines


def test_version_matches_the_package_and_the_server(sidecar: tuple[str, str]) -> None:
    """`infercache --version` prints the installed distribution's version, which is
    what a running sidecar reports in GetServerInfo."""
    done = cli("--version", token=None)
    assert done.returncode == 0
    assert done.stdout.strip() == f"infercache {metadata.version('infercache')}"
    data, _ = sidecar
    with CacheClient(data) as client:
        assert client.server_info().server_version == metadata.version("infercache")
