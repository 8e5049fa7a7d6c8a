"""The seed documents' Python examples run against mnemo with only the host changed (the key is
read from MEMORY_API_KEY, as the seeds do), through the `vikingdb` compatibility shim."""

import os
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
SDK = HERE.parent


def run_example(name: str, server) -> str:
    env = dict(
        os.environ,
        MNEMO_URL=server.url,
        MEMORY_API_KEY=server.key,
        PYTHONPATH=os.pathsep.join([str(SDK / "src"), str(SDK / "compat" / "src")]),
    )
    out = subprocess.run(
        [sys.executable, str(HERE / "seed_examples" / name)], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_seed_000_streaming_write_then_get_context(server):
    out = run_example("seed000.py", server)
    assert "写入成功" in out and "失败" not in out, out
    # The turns were written; below the trigger they are short-term memory in the context.
    assert "------ 拼接好的 Prompt 上下文 ------" in out
    assert "我家宝宝1岁，最近喝奶粉总胀气" in out, out


def test_seed_001_add_search_batch_delete(server):
    out = run_example("seed001.py", server)
    assert "search_event_memory response:" in out, out
    assert "手冲咖啡" in out and "意式浓缩" in out, out
    # The example's `finally` deleted what it added.
    user = [line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("user_id:")][0]
    sys.path.insert(0, str(SDK / "src"))
    from mnemo_client import APIKey, MemoryClient

    c = MemoryClient(host=server.url, auth=APIKey(api_key=server.key)).get_collection("your_collection")
    assert c.search_event_memory(filter={"user_id": user})["count"] == 0
