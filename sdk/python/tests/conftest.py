"""Starts the real `mnemo serve` binary on a free loopback port for the tests, with an API key
(the seed 001 example insists on one). The binary: $MNEMO_BIN, else <repo>/target/debug/mnemo."""

import os
import pathlib
import subprocess
import sys
import tempfile

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
KEY = "test-key-0123456789"


def store_env(tag: str) -> dict:
    """The environment that points a mnemo process at the test store: the embedded default, or
    with MNEMO_TEST_STORE=postgres a PostgreSQL schema of its own (MNEMO_TEST_DATABASE_URL)."""
    if os.environ.get("MNEMO_TEST_STORE") != "postgres":
        return {}
    url = os.environ["MNEMO_TEST_DATABASE_URL"]
    schema = "py_" + "".join(c if c.isalnum() else "_" for c in tag)[-40:].lower()
    return {"MNEMO_STORE__ENGINE": "postgres", "MNEMO_STORE__URL": url, "MNEMO_STORE__SCHEMA": schema, "MNEMO_STORE__POOL": "4"}


def _binary() -> str:
    b = os.environ.get("MNEMO_BIN") or str(REPO / "target" / "debug" / "mnemo")
    if not os.path.exists(b):
        pytest.exit(f"mnemo binary not found at {b}: run `cargo build` first or set MNEMO_BIN", 2)
    return b


class Server:
    def __init__(self, extra_yaml: str = "", extra_keys_yaml: str = ""):
        self.dir = tempfile.TemporaryDirectory()
        cfg = pathlib.Path(self.dir.name) / "mnemo.yaml"
        cfg.write_text(
            "server:\n  api_keys:\n    - key_env: MNEMO_PYTEST_KEY\n      projects: [default, other]\n" + extra_keys_yaml +
            "session:\n  poll_interval_ms: 50\nextraction:\n  retry_base_ms: 200\n" + extra_yaml
        )
        env = dict(os.environ, MNEMO_PYTEST_KEY=KEY, MNEMO_LOG="warn", **store_env(self.dir.name))
        self.proc = subprocess.Popen(
            [_binary(), "serve", "--config", str(cfg), "--bind", "127.0.0.1:0", "--data", str(pathlib.Path(self.dir.name) / "data")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        line = self.proc.stdout.readline().strip()
        prefix = "mnemo listening on "
        if not line.startswith(prefix):
            self.proc.kill()
            raise RuntimeError(f"mnemo did not start: {line!r} {self.proc.stderr.read()}")
        self.url = line[len(prefix):].split(" ")[0]
        self.key = KEY

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.dir.cleanup()


@pytest.fixture(scope="session")
def server():
    s = Server()
    yield s
    s.stop()


@pytest.fixture
def client(server):
    sys.path.insert(0, str(REPO / "sdk" / "python" / "src"))
    from mnemo_client import MemoryClient, APIKey

    return MemoryClient(host=server.url, auth=APIKey(api_key=server.key), max_retries=2, backoff=0.05)
