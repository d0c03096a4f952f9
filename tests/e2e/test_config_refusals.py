"""Bad configuration with a real `infercache serve`: refused at once, naming the variable
(issue 14 item 7), and an unknown INFERCACHE_* variable warned about with the closest one."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.processes import RedisServer, free_port
from tests.support.sidecars import INFERCACHE, SidecarProcess, clean_env

pytestmark = pytest.mark.e2e

# A refusal is due within 3 s; the bound is generous for a loaded 2-core CI machine (the
# interpreter's start alone can take seconds there) but far below a hang.
REFUSAL_BOUND_S = 20.0
TOKEN = "0123456789abcdef0123"


def _refused(*flags: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `serve` expecting it to refuse; assert it exited non-zero within the bound."""
    started = time.monotonic()
    argv = [str(INFERCACHE), "serve", "--admin-listen", "", "--metrics-listen", ""]
    result = subprocess.run(
        [*argv, *flags],
        env=clean_env(**({"INFERCACHE_LISTEN": f"127.0.0.1:{free_port()}"} | env)),
        capture_output=True,
        text=True,
        timeout=REFUSAL_BOUND_S + 10,
        check=False,
    )
    took = time.monotonic() - started
    assert result.returncode != 0, result.stderr
    assert took < REFUSAL_BOUND_S, f"refused after {took:.1f} s"
    return result


@pytest.mark.parametrize("port", [99999, 65536, 70000])
def test_a_listen_port_out_of_range_is_refused(port: int) -> None:
    """INFERCACHE_LISTEN with a port above 65535 is refused (gRPC would wrap it and serve
    on port % 65536)."""
    result = _refused(INFERCACHE_LISTEN=f"127.0.0.1:{port}")
    assert result.returncode == 2
    assert "INFERCACHE_LISTEN" in result.stderr
    assert f"port {port} of '127.0.0.1:{port}' is out of range" in result.stderr


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis://127.0.0.1:notaport/0", "port is not a number"),
        ("redis://127.0.0.1:6379/x", "database is not a number"),
    ],
)
def test_a_malformed_redis_url_is_refused(url: str, problem: str) -> None:
    """A Redis URL with a non-numeric port or database is refused naming the variable
    (no traceback)."""
    result = _refused(INFERCACHE_REDIS_URL=url)
    assert result.returncode == 2
    assert f"INFERCACHE_REDIS_URL: the URL's {problem}" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("variable", ["INFERCACHE_POLICY_FILE", "INFERCACHE_ADMIN_TOKENS_FILE"])
def test_a_file_setting_that_is_a_fifo_is_refused_not_waited_on(
    tmp_path: Path, variable: str
) -> None:
    """A FIFO as the policy or admin tokens file is refused at once (opening it would
    block the start until a writer came)."""
    fifo = tmp_path / "file.yaml"
    os.mkfifo(fifo)
    result = _refused(**{variable: str(fifo)})
    assert result.returncode == 2
    assert f"{variable}: {fifo} is not a regular file" in result.stderr


def test_abbreviated_flags_are_refused() -> None:
    """`--hot-max-byte` is not taken for --hot-max-bytes."""
    result = _refused("--hot-max-byte", "1MiB")
    assert result.returncode == 2
    assert "unrecognized arguments: --hot-max-byte" in result.stderr


def test_a_semicolon_inside_admin_tokens_is_refused() -> None:
    """`NAME=TOKEN;NAME2=TOKEN2` is refused rather than read as one token holding a ';'."""
    result = _refused(INFERCACHE_ADMIN_TOKENS=f"ops={TOKEN};ci={TOKEN}x")
    assert result.returncode == 2
    assert "INFERCACHE_ADMIN_TOKENS: ';' in the pair of 'ops'" in result.stderr
    assert TOKEN not in result.stderr


@pytest.mark.parametrize(
    ("flag", "variable"),
    [
        ("--admin-listen", "INFERCACHE_ADMIN_LISTEN"),
        ("--health-listen", "INFERCACHE_HEALTH_LISTEN"),
        ("--metrics-listen", "INFERCACHE_METRICS_LISTEN"),
    ],
)
def test_a_port_in_use_names_its_variable(flag: str, variable: str) -> None:
    """A listener whose port someone else holds fails the start with a last line naming its
    variable (and no gRPC C-core error line)."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = f"127.0.0.1:{holder.getsockname()[1]}"
        result = _refused(flag, taken, "--no-kv-enabled")
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith(f"infercache: {variable}: "), lines
    assert taken in lines[-1]
    assert "Address already in use" in lines[-1]
    assert not any("Failed to add port" in line for line in lines), lines


def test_a_unix_socket_in_a_missing_directory_is_one_line(tmp_path: Path) -> None:
    """INFERCACHE_LISTEN=unix:PATH whose directory does not exist fails the start with one
    line naming the variable and the directory, without gRPC's "Failed to add port" line."""
    missing = tmp_path / "no-such-dir"
    result = _refused("--no-kv-enabled", INFERCACHE_LISTEN=f"unix:{missing}/ic.sock")
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [
        f"infercache: INFERCACHE_LISTEN: cannot listen on unix:{missing}/ic.sock: "
        f"no such directory {missing}"
    ], lines


def test_an_unknown_variable_is_warned_about_with_the_closest_known_one() -> None:
    """A typo such as INFERCACHE_LISTEN_ADDR is not silently ignored: the start warns, naming
    INFERCACHE_LISTEN; a variable close to nothing is warned about without a guess."""
    env = {"INFERCACHE_LISTEN_ADDR": "127.0.0.1:1", "INFERCACHE_ZZZ": "1"}
    served = SidecarProcess(operator=True, admin=False, env=env, kv_enabled=False)
    try:
        served.wait_ready()
        stderr = served.stderr()
    finally:
        served.stop()
    assert "INFERCACHE_LISTEN_ADDR is not a setting and is ignored; did you mean " in stderr
    assert "did you mean INFERCACHE_LISTEN?" in stderr
    assert "INFERCACHE_ZZZ is not a setting and is ignored" in stderr
    assert "INFERCACHE_ZZZ is not a setting and is ignored;" not in stderr


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"acme\n", "expected TENANT=KEY"),
        (b"acme=short\n", "at least 16 characters"),
        (b"acme=\xff\xfe0123456789abcdef\n", "codec"),
    ],
)
def test_a_gateway_keys_file_that_does_not_parse_is_refused_with_the_listeners_up(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    """The admin listener is on (it started before the keys file was read, until
    2026-12-02, and a bad file then left the process running forever after its
    traceback): exit 2 within the bound, one line naming the setting."""
    from tests.support.checkpoints import llama_tensors, write_model

    keys = tmp_path / "keys"
    keys.write_bytes(content)
    model = write_model(tmp_path / "model", llama_tensors(layers=1, seed=1))
    started = time.monotonic()
    argv = [str(INFERCACHE), "serve", "--metrics-listen", "", "--no-kv-enabled"]
    argv += ["--admin-listen", f"127.0.0.1:{free_port()}", "--model-path", str(model)]
    argv += ["--gateway-listen", f"127.0.0.1:{free_port()}", "--gateway-keys-file", str(keys)]
    result = subprocess.run(
        argv,
        env=clean_env(INFERCACHE_LISTEN=f"127.0.0.1:{free_port()}"),
        capture_output=True,
        text=True,
        timeout=REFUSAL_BOUND_S + 10,
        check=False,
    )
    assert time.monotonic() - started < REFUSAL_BOUND_S
    assert result.returncode == 2, result.stderr
    last = [line for line in result.stderr.splitlines() if line.strip()][-1]
    assert last.startswith("infercache: configuration error: INFERCACHE_GATEWAY_KEYS_FILE: "), last
    assert problem in last


def test_a_shared_redis_without_a_fleet_secret_is_refused_with_exit_2() -> None:
    """Issue 25: INFERCACHE_REDIS_URL without INFERCACHE_FLEET_SECRET_FILE exits 2 at once,
    naming the variable (no connection is tried: the port is closed)."""
    result = _refused(INFERCACHE_REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")
    assert result.returncode == 2
    assert "INFERCACHE_FLEET_SECRET_FILE is not" in result.stderr
    assert "INFERCACHE_INSECURE_DEV_NO_FLEET_SECRET" in result.stderr


def test_the_dev_switch_starts_on_redis_without_a_secret_and_embedded_needs_none(
    redis_server: RedisServer,
) -> None:
    """With INFERCACHE_INSECURE_DEV_NO_FLEET_SECRET=true a sidecar starts on Redis without
    a secret (and warns); the embedded store (`make run`) starts with no secret at all."""
    dev = SidecarProcess(
        redis_server.url, operator=True, env={"INFERCACHE_INSECURE_DEV_NO_FLEET_SECRET": "true"}
    )
    embedded = SidecarProcess(operator=True)
    try:
        dev.wait_ready()
        embedded.wait_ready()
        assert "insecure_dev_no_fleet_secret" in dev.stderr()
    finally:
        dev.stop()
        embedded.stop()
