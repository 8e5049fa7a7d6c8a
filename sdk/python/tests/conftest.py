"""Starts the real `mnemo serve` binary on a free loopback port for the tests, with an API key
(the seed 001 example insists on one). The binary: $MNEMO_BIN, else <repo>/target/debug/mnemo."""

import os
import pathlib
import subprocess
import sys
import tempfile

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
# The mnemo servers the tests started (answers from the tests' own fake servers are not checked).
REAL_SERVERS: set = set()
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
        REAL_SERVERS.add(self.url)

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


# --------------------------------------------------------------------- answers match the document

DOC = REPO / "docs" / "openapi.json"
# Paths whose answer is not the envelope's `data` (JSON lines).
_NOT_ENVELOPED = {"user/export"}
ANSWERS_CHECKED: set = set()


def _answer_validator():
    """Validates an answer's `data` against what docs/openapi.json says that path answers."""
    import json

    from openapi_schema_validator import OAS30Validator
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT4

    doc = json.loads(DOC.read_text())
    registry = Registry().with_resource("urn:mnemo", Resource.from_contents(doc, default_specification=DRAFT4))

    def check(path: str, data):
        if path in _NOT_ENVELOPED or f"/api/memory/{path}" not in doc["paths"]:
            return
        pointer = "/paths/" + f"/api/memory/{path}".replace("/", "~1") + "/post/responses/200/content/application~1json/schema/allOf/1/properties/data"
        OAS30Validator({"$ref": f"urn:mnemo#{pointer}"}, registry=registry).validate(data)
        ANSWERS_CHECKED.add(path)

    return check


@pytest.fixture(scope="session", autouse=True)
def answers_match_the_document():
    """Every answer any test receives through the SDK (sync or async) is checked against the
    OpenAPI document's answer schema for its path: the document cannot drift from the server."""
    sys.path.insert(0, str(REPO / "sdk" / "python" / "src"))
    from mnemo_client import client as sync_client

    check = _answer_validator()
    original = sync_client.MemoryClient.request

    def request(self, path, body, headers=None, timeout=None):
        data = original(self, path, body, headers=headers, timeout=timeout)
        if self.base_url in REAL_SERVERS:
            check(path.lstrip("/"), data)
        return data

    sync_client.MemoryClient.request = request
    patched = [(sync_client.MemoryClient, original)]
    try:
        from mnemo_client import aio

        original_async = aio.AsyncMemoryClient.request

        async def arequest(self, path, body, headers=None, timeout=None):
            data = await original_async(self, path, body, headers=headers, timeout=timeout)
            if self.base_url in REAL_SERVERS:
                check(path.lstrip("/"), data)
            return data

        aio.AsyncMemoryClient.request = arequest
        patched.append((aio.AsyncMemoryClient, original_async))
    except ImportError:  # httpx absent: the async client is not under test
        pass
    yield
    for cls, fn in patched:
        cls.request = fn
