"""mnemo_client against the real server: every call family, typed errors, retries, the async variant."""

import asyncio
import http.server
import json
import pathlib
import threading
import time

import pytest

from mnemo_client import APIKey, AsyncMemoryClient, MemoryClient, MnemoError, VikingMem


def wait_for(fn, secs=20):
    deadline = time.time() + secs
    while time.time() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError("timed out")


def test_write_extract_context_search_and_profiles(client):
    c = client.get_collection("py_main")
    w = c.streaming_write(
        conversation_id="conv-1",
        messages=[
            {"role": "user", "content": "我住在上海，我对花生过敏。周末想去一家新的咖啡店。"},
            {"role": "assistant", "content": "好的，记住了。"},
        ],
        extract_trigger={"message_count": 2},
        metadata={"user_id": "alice"},
    )
    assert w["extraction"]["triggered"] is True
    wait_for(lambda: all(j["state"] == "done" for j in c.list_jobs()) and c.list_jobs())
    ctx = c.get_context(conversation_id="conv-1", query="咖啡", max_tokens=400)
    assert "上海" in ctx.context_str and ctx.token_count <= 400
    assert ctx.profiles and ctx.short_term_memory == []
    found = c.search_event_memory(query="咖啡店", filter={"user_id": "alice"}, limit=3)
    assert found["count"] >= 1 and "score" in found["result_list"][0]
    profiles = c.search_profile_memory(filter={"user_id": "alice"})["result_list"]
    assert profiles[0]["attributes"]["city"] == "上海"
    p = c.update_profile(profiles[0]["id"], attributes={"city": "杭州"})
    assert p["profile"]["attributes"]["city"] == "杭州"
    e = c.add_event("event_v1", user_id="alice", memory_info={"summary": "用户买了一台相机"})
    updated = c.update_event(e["event_id"], memory_info={"summary": "用户买了一台徕卡相机"})
    assert updated["event"]["memory_info"]["summary"].endswith("徕卡相机")
    assert c.delete_event(e["event_id"])["deleted"] is True
    batch = c.add_events([
        {"event_type": "event_v1", "user_id": "alice", "memory_info": {"summary": "用户报名了摄影课"}},
        {"event_type": "event_v1", "user_id": "alice", "memory_info": {"summary": "Alice bought a tripod"}},
    ])
    assert batch["count"] == 2 and len(batch["event_ids"]) == 2
    with pytest.raises(MnemoError) as bad:
        c.add_events([{"event_type": "event_v1", "user_id": "alice", "memory_info": {"summary": "x"}, "ttl_relative": 0}])
    assert bad.value.status == 400 and "events[0].ttl_relative" in str(bad.value)
    assert c.stats(user_id="alice")["total_events"] >= 1


def test_export_and_forget(client):
    c = client.get_collection("py_privacy")
    c.add_event("event_v1", user_id="bob", memory_info={"summary": "Bob likes jazz"})
    assert len(c.export_user("bob")["events"]) == 1
    assert c.forget_user("bob")["deleted"]["events"] == 1
    assert c.export_user("bob")["events"] == []


def test_entities_of_a_user(client):
    c = client.get_collection("py_entities")
    c.add_events([
        {"event_type": "event_v1", "user_id": "maya", "memory_info": {"summary": "My sister Ingrid moved to Munich."}},
        {"event_type": "event_v1", "user_id": "maya", "memory_info": {"summary": "We walked my dog Biscuit with my sister."}},
    ])
    people = c.list_entities("maya", kind="person")["entities"]
    assert [(e["name"], e["aliases"], e["event_count"]) for e in people] == [("Ingrid", ["sister"], 2)]
    got = c.get_entity("maya", "sister", limit=1)
    assert got["entity"]["name"] == "Ingrid" and got["count"] == 1
    assert c.list_entities("maya", kind="pet")["entities"][0]["name"] == "Biscuit"
    with pytest.raises(MnemoError) as bad:
        c.list_entities("maya", kind="planet")
    assert bad.value.status == 400 and "filter.kind" in bad.value.message


def test_as_of_reads_what_was_true_then(client):
    c = client.get_collection("py_as_of")
    t = 1_700_000_000_000
    c.add_event("event_v1", user_id="ana", memory_info={"summary": "Ana lives in Berlin"}, time=t)
    found = c.search_event_memory(filter={"user_id": "ana"}, as_of=t)["result_list"]
    assert [(e["valid_from"], e["valid_to"]) for e in found] == [(t, None)]
    assert c.search_event_memory(filter={"user_id": "ana"}, as_of=t - 1)["count"] == 0
    added = c.add_profile("ana", attributes={"city": "Berlin"})
    moved = c.update_profile(added["profile_id"], attributes={"city": "Munich"})["profile"]
    (berlin,) = [h for h in moved["history"] if h["attribute"] == "city"]
    assert berlin["value"] == "Berlin" and moved["since"]["city"] == berlin["valid_to"]
    then = c.search_profile_memory(filter={"user_id": "ana"}, as_of=berlin["valid_to"] - 1)["result_list"]
    now = c.search_profile_memory(filter={"user_id": "ana"})["result_list"]
    assert (then[0]["attributes"]["city"], now[0]["attributes"]["city"]) == ("Berlin", "Munich")
    ctx = c.get_context("py-as-of", query="where", event_search_config={"filter": {"user_id": "ana"}}, as_of=t)
    assert "Berlin" in ctx.context_str and "Munich" not in ctx.context_str
    (ana,) = c.list_users(contains="AN")
    assert (ana["user_id"], ana["event_count"], ana["conversation_count"]) == ("ana", 1, 0)
    with pytest.raises(MnemoError) as bad:
        c.search_memory(filter={"user_id": "ana"}, as_of=-1)
    assert bad.value.status == 400 and bad.value.message.startswith("as_of")


def test_errors_are_typed_and_name_the_field(client):
    c = client.get_collection("py_errors")
    with pytest.raises(MnemoError) as e:
        c.search_event_memory(query="x", filter={"user_id": "u"}, limit=0)
    assert e.value.status == 400 and e.value.code == 40000
    assert "limit" in e.value.message and e.value.request_id
    bad = MemoryClient(host=client.base_url, auth=APIKey(api_key="wrong"), max_retries=0)
    with pytest.raises(MnemoError) as e:
        bad.get_collection("py_errors").search_event_memory(filter={"user_id": "u"})
    assert e.value.status == 401


def test_custom_schema_collection(client):
    c = client.create_collection(
        "py_custom",
        event_types=[{"name": "purchase", "description": "a purchase", "fields": [
            {"name": "item", "type": "string", "required": True}, {"name": "price", "type": "float"}]}],
    )
    c.add_event("purchase", user_id="carol", memory_info={"item": "相机", "price": 499.0})
    with pytest.raises(MnemoError) as e:
        c.add_event("purchase", user_id="carol", memory_info={"item": "x", "price": "cheap"})
    assert "price" in e.value.message
    assert any(x["collection_name"] == "py_custom" for x in client.list_collections())
    assert any(t["name"] == "purchase" for t in c.info()["event_types"])


def test_retries_on_429_and_503_then_succeeds():
    calls = []

    class Flaky(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            calls.append(self.path)
            self.rfile.read(int(self.headers["Content-Length"]))
            if len(calls) == 1:
                self.send_response(429)
                self.send_header("Retry-After", "0")
                self.end_headers()
                self.wfile.write(b'{"code":42900,"message":"busy","request_id":"r1"}')
                return
            if len(calls) == 2:
                self.send_response(503)
                self.end_headers()
                return
            body = json.dumps({"code": 0, "message": "success", "request_id": "r3", "data": {"ok": True}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Flaky)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        c = MemoryClient(host=f"http://127.0.0.1:{srv.server_port}", backoff=0.01, max_retries=3)
        assert c.request("stats", {}) == {"ok": True}
        assert len(calls) == 3
        calls.clear()
        with pytest.raises(MnemoError) as e:
            MemoryClient(host=f"http://127.0.0.1:{srv.server_port}", max_retries=0).request("stats", {})
        assert e.value.status == 429 and e.value.request_id == "r1"
    finally:
        srv.shutdown()


def test_timeouts_and_unreachable_servers_raise():
    c = MemoryClient(host="http://127.0.0.1:9", max_retries=1, backoff=0.01, timeout=0.5)
    with pytest.raises(MnemoError):
        c.request("stats", {})


def test_async_variant(server):
    async def go():
        ac = AsyncMemoryClient(host=server.url, auth=APIKey(api_key=server.key))
        col = ac.get_collection("py_async")
        await col.add_event("event_v1", user_id="dave", memory_info={"summary": "Dave runs marathons"})
        results = await asyncio.gather(*[col.search_event_memory(query="marathon", filter={"user_id": "dave"}) for _ in range(4)])
        return results

    threads_before = threading.active_count()
    results = asyncio.run(go())
    assert all(r["count"] == 1 for r in results)
    assert VikingMem is MemoryClient
    # Truly asynchronous: no worker thread per call (the calls share one connection pool).
    assert threading.active_count() == threads_before, "no thread was started for the calls"


def test_async_client_closes_and_raises_typed_errors(server):
    async def go():
        async with AsyncMemoryClient(host=server.url, auth=APIKey(api_key=server.key)) as ac:
            health = await ac.healthz()
            with pytest.raises(MnemoError) as bad:
                await ac.get_collection("py_async").search_event_memory(query="x", filter={"user_id": "u"}, limit=0)
            assert bad.value.status == 400 and "limit" in bad.value.message
            ctx = await ac.get_collection("py_async").get_context("nobody", query="marathon")
            assert isinstance(ctx.context_str, str)
        assert ac._http is None, "closed on leaving the block"
        return health

    assert asyncio.run(go())["status"] in ("ok", "degraded")


def test_the_async_module_is_generated_from_the_sync_one():
    import subprocess
    import sys

    gen = pathlib.Path(__file__).resolve().parents[3] / "scripts" / "gen-python-async"
    assert subprocess.run([sys.executable, str(gen), "--check"]).returncode == 0, "run scripts/gen-python-async"


def test_session_add_by_vikingdb_session_id_replaces_the_session(client):
    col = client.get_collection("sa_" + __import__("uuid").uuid4().hex[:8])
    first = col.session_add(session_id="trip", messages=[{"role": "user", "content": "I love sailing"}],
                            metadata={"user_id": "sa"}, extract_memory_type=["event_v1"])
    assert first["session_id"] == "trip" and first["replaced"] is False
    again = col.session_add(session_id="trip", messages=[{"role": "user", "content": "I love rowing"}],
                            metadata={"user_id": "sa"})
    assert again["replaced"] is True
    info = col.session_info(session_id="trip")
    assert [m["content"] for m in info["messages"]] == ["I love rowing"]
    generated = col.session_add(messages=[{"role": "user", "content": "hello"}])
    assert generated["session_id"].startswith("ses_")
