"""Volcengine's own VikingDB SDK (`vikingdb-python-sdk`, pinned in scripts/test-vikingdb) drives
mnemo with only the host and the credentials changed: every `vikingdb.memory` method, sync and
async, with both of its auth modes, checking what the calls did — owners of extracted events,
a re-used session_id replacing the session, profile contents, search filters, error classes.

Runs in its own virtualenv without the `vikingdb` compatibility shim on the path (the module
names are the same): `./scripts/test-vikingdb`."""

import asyncio
import os
import pathlib
import sys
import time
import uuid

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
from conftest import Server  # noqa: E402  (the real binary on a free port)

import vikingdb  # noqa: E402
from vikingdb import APIKey, IAM  # noqa: E402
from vikingdb.memory import VikingMem  # noqa: E402
from vikingdb.memory.exceptions import (  # noqa: E402
    CollectionNotExistException,
    InvalidRequestException,
    UnauthorizedException,
    VikingMemException,
)

AK, SK = "AKMNEMOTEST", "sk-mnemo-test-0123456789abcdef"

assert "compat" not in vikingdb.__file__, f"the real SDK, not the shim: {vikingdb.__file__}"


@pytest.fixture(scope="module")
def server():
    s = Server(
        extra_yaml="extraction:\n  dedup_similarity: 0\n",
        extra_keys_yaml=f"    - access_key: {AK}\n      secret_key_env: MNEMO_PYTEST_SK\n      projects: [default]\n",
    )
    yield s
    s.stop()


os.environ["MNEMO_PYTEST_SK"] = SK


def client(server, auth=None) -> VikingMem:
    host = server.url.split("://", 1)[1]
    return VikingMem(host=host, scheme="http", auth=auth or IAM(ak=AK, sk=SK))


def fresh() -> str:
    return "c_" + uuid.uuid4().hex[:10]


def wait_extracted(col, session_id, timeout=30):
    """session/info once every extraction job of the session is done."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        d = col.get_session_info(session_id)["data"]
        if d["jobs"] and all(j["state"] == "done" for j in d["jobs"]):
            return d
        time.sleep(0.1)
    raise AssertionError(f"session {session_id} was not extracted: {d}")


def test_iam_signatures_are_verified(server):
    assert client(server).ping() is True
    with pytest.raises(VikingMemException):  # ping wraps every failure in its own exception
        client(server, IAM(ak=AK, sk="sk-not-the-secret-0123456789")).ping()
    col = client(server, IAM(ak=AK, sk="sk-not-the-secret-0123456789")).get_collection(collection_name=fresh())
    with pytest.raises(UnauthorizedException) as e:
        col.search_event_memory(query="x", filter={"user_id": "u"})
    assert "signature" in e.value.message
    # A signature made 20 minutes ago is stale.
    from volcengine.auth.SignerV4 import SignerV4

    real = SignerV4.get_current_format_date
    SignerV4.get_current_format_date = staticmethod(
        lambda: time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() - 20 * 60))
    )
    try:
        with pytest.raises(UnauthorizedException) as e:
            client(server).get_collection(collection_name=fresh()).search_event_memory(filter={"user_id": "u"})
        assert "stale" in e.value.message
    finally:
        SignerV4.get_current_format_date = real


def test_api_keys_work_and_a_wrong_one_is_unauthorized(server):
    col = client(server, APIKey(api_key=server.key)).get_collection(collection_name=fresh())
    r = col.add_event("sys_event_v1", {"summary": "bought a bike"}, user_id="u1")
    assert r["code"] == 0 and r["message"] == "success"
    bad = client(server, APIKey(api_key="not-a-key-0123456789")).get_collection(collection_name=fresh())
    with pytest.raises(UnauthorizedException):
        bad.add_event("sys_event_v1", {"summary": "x"}, user_id="u1")
    # (The SDK's ping() cannot succeed with an APIKey: it signs GET requests with IAM credentials it
    # does not have and fails before sending anything — a client-side limitation.)


def test_the_sdk_readme_memory_example(server):
    # Verbatim from the SDK's README (Memory Management), host and credentials changed.
    auth = IAM(ak=AK, sk=SK)
    client = VikingMem(
        host=server.url.split("://", 1)[1],
        region="cn-beijing",
        auth=auth,
        scheme="http",
        pool_connections=20,
        pool_maxsize=50,
    )
    collection = client.get_collection(collection_name="demo_collection", project_name="default")
    collection.add_session(
        session_id="session_001",
        messages=[
            {"role": "user", "content": "Hello, how is the weather today?"},
            {"role": "assistant", "content": "Today is sunny, perfect for going out."},
        ],
        metadata={"default_user_id": "user_001", "default_assistant_id": "assistant_001"},
    )
    wait_extracted(collection, "session_001")
    result = collection.search_memory(
        query="weather today", filter={"user_id": "user_001", "memory_type": ["event_v1"]}, limit=10
    )
    items = result["data"]["result_list"]
    assert items and all(i["memory_category"] == "event" for i in items)
    assert "sunny" in items[0]["memory_info"]["summary"]


def test_add_session_owns_events_and_a_reused_session_id_replaces_the_session(server):
    col = client(server).get_collection(collection_name=fresh())
    r = col.add_session(
        session_id="trip_1",
        messages=[
            {"role": "user", "content": "I love hiking in the Alps every summer"},
            {"role": "assistant", "content": "Sounds wonderful!"},
        ],
        metadata={"default_user_id": "ana", "default_assistant_id": "bot", "default_user_name": "Ana"},
    )
    assert r["data"]["session_id"] == "trip_1" and r["data"]["replaced"] is False
    d = wait_extracted(col, "trip_1")
    [event] = d["event_memory"]
    assert event["user_id"] == ["ana"] and event["assistant_id"] == ["bot"]
    assert event["event_type"] == "event_v1" and "hiking" in event["memory_info"]["summary"]
    assert [m["name"] for m in d["messages"]] == ["Ana", None]
    assert {"embedding_tokens", "llm_input_tokens", "llm_output_tokens"} <= d["usage"].keys()
    profile = col.search_profile_memory(filter={"user_id": "ana"})["data"]["result_list"]
    assert profile and "hiking" in str(profile[0]["memory_info"])

    # The same session_id again: the earlier events and profile changes are withdrawn.
    r = col.add_session(
        session_id="trip_1",
        messages=[{"role": "user", "content": "I love swimming in the sea"}],
        metadata={"default_user_id": "ana"},
    )
    assert r["data"]["replaced"] is True
    d = wait_extracted(col, "trip_1")
    assert [("swimming" in e["memory_info"]["summary"]) for e in d["event_memory"]] == [True]
    events = col.search_event_memory(query="hiking", filter={"user_id": "ana"})["data"]["result_list"]
    assert all("hiking" not in e["memory_info"]["summary"] for e in events), events
    profile = col.search_profile_memory(filter={"user_id": "ana"})["data"]["result_list"]
    assert "hiking" not in str(profile) and "swimming" in str(profile)


def test_add_session_without_an_id_multimodal_and_refusals(server):
    col = client(server).get_collection(collection_name=fresh())
    r = col.add_session(
        session_id=None,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "https://example.org/sandwich.jpeg"}},
                    {"type": "text", "text": "I just ate this sandwich"},
                ],
            }
        ],
        metadata={"default_user_id": "bo"},
        store_file=True,
    )
    sid = r["data"]["session_id"]
    assert sid.startswith("ses_")
    d = wait_extracted(col, sid)
    assert d["messages"][0]["content"] == "[image: https://example.org/sandwich.jpeg]\nI just ate this sandwich"
    with pytest.raises(InvalidRequestException) as e:
        col.add_session("s2", [{"role": "user", "content": "hi"}], store_file=False)
    assert e.value.message.startswith("store_file:")
    with pytest.raises(InvalidRequestException) as e:
        col.add_session("bad id!", [{"role": "user", "content": "hi"}])
    assert e.value.message.startswith("session_id:")
    with pytest.raises(InvalidRequestException) as e:
        col.add_session("s3", [{"role": "user", "content": "hi"}], profiles=[{"profile_type": "profile_v1"}])
    assert e.value.message.startswith("profiles:")
    with pytest.raises(InvalidRequestException) as e:
        col.add_session("s4", [{"role": "assistant", "content": "hi", "role_id": "bot2"}], metadata={"default_assistant_id": "bot"})
    assert e.value.message.startswith("messages[0].role_id:")


def test_a_group_chat_s_speakers_own_the_events_from_their_messages(server):
    col = client(server).get_collection(collection_name=fresh())
    col.add_session(
        "team_lunch",
        [
            {"role": "user", "content": "Let's book the Thai place for Friday"},
            {"role": "user", "content": "I can't eat peanuts, remember", "role_id": "carol", "role_name": "Carol"},
            {"role": "assistant", "content": "Booked, and I noted the peanut allergy."},
        ],
        metadata={"default_user_id": "dan", "default_assistant_id": "bot"},
    )
    d = wait_extracted(col, "team_lunch")
    assert [m["name"] for m in d["messages"]] == [None, "Carol", None]
    for user in ["dan", "carol"]:
        hits = col.search_event_memory(query="peanut allergy", filter={"user_id": user})["data"]["result_list"]
        assert hits and "peanut" in hits[0]["memory_info"]["summary"], (user, hits)
    assert sorted(d["event_memory"][0]["user_id"]) == ["carol", "dan"]


def test_events_crud_and_search_filters(server):
    col = client(server).get_collection(collection_name=fresh())
    a = col.add_event("sys_event_v1", {"summary": "Renewed the passport at the embassy"}, user_id="u1", group_id="g1")
    col.add_event("event_v1", {"summary": "Bought a passport holder online"}, user_id="u2")
    event_id = a["data"]["event_id"]
    hits = col.search_event_memory(query="passport", filter={"user_id": "u1"}, limit=5)["data"]["result_list"]
    assert [h["event_id"] for h in hits] == [event_id]
    assert col.search_event_memory(query="passport", filter={"user_id": "u1", "group_id": "g2"})["data"]["result_list"] == []
    by_type = col.search_event_memory(filter={"user_id": "u2", "memory_type": ["sys_event_v1"]})["data"]["result_list"]
    assert len(by_type) == 1
    future = col.search_event_memory(filter={"user_id": "u1", "start_time": int(time.time() * 1000) + 3_600_000})
    assert future["data"]["result_list"] == []
    decayed = col.search_event_memory(
        query="passport", filter={"user_id": "u1"}, time_decay_config={"weight": 0.5}, limit=1
    )["data"]["result_list"]
    assert decayed[0]["time_score"] is not None
    col.update_event(event_id, {"summary": "Renewed the passport and the visa"})
    assert "visa" in col.search_event_memory(query="visa", filter={"user_id": "u1"})["data"]["result_list"][0]["memory_info"]["summary"]
    col.delete_event(event_id)
    assert col.search_event_memory(filter={"user_id": "u1"})["data"]["result_list"] == []
    col.batch_delete_event(filter={"user_id": "u2", "event_type": "sys_event_v1"})
    assert col.search_event_memory(filter={"user_id": "u2"})["data"]["result_list"] == []


def test_profiles_take_memory_info(server):
    col = client(server).get_collection(collection_name=fresh())
    p = col.add_profile("sys_profile_v1", {"city": "Lisbon", "job": "nurse"}, user_id="p1")["data"]
    assert p["profile"]["memory_info"] == {"city": "Lisbon", "job": "nurse"}
    assert p["profile"]["primary_key"] == p["profile_id"]
    with pytest.raises(VikingMemException) as e:  # a second one without is_upsert
        col.add_profile("sys_profile_v1", {"city": "Porto"}, user_id="p1")
    assert e.value.status_code == 409
    up = col.add_profile("sys_profile_v1", {"city": "Porto"}, user_id="p1", is_upsert=True)["data"]
    assert up["profile_id"] == p["profile_id"] and up["profile"]["memory_info"] == {"city": "Porto"}
    col.update_profile(p["profile_id"], {"pet": "cat"})
    [found] = col.search_profile_memory(query="animals at home", filter={"user_id": "p1"})["data"]["result_list"]
    assert found["memory_info"] == {"city": "Porto", "pet": "cat"} and 0 < found["score"] <= 1
    with pytest.raises(InvalidRequestException):
        col.add_profile("sys_profile_v1", {"city": "x"}, user_id="p2", group_id="g")
    col.add_profile("profile_v1", {"city": "Oslo"}, user_id="p2")
    assert col.batch_delete_profile(filter={"user_id": "p2"})["data"]["deleted"] == 1
    col.delete_profile(p["profile_id"])
    assert col.search_profile_memory(filter={"user_id": "p1"})["data"]["result_list"] == []


def test_trigger_update_profile_rederives_from_the_sessions(server):
    col = client(server).get_collection(collection_name=fresh())
    col.add_session("t1", [{"role": "user", "content": "I love jazz music"}], metadata={"default_user_id": "tu"})
    wait_extracted(col, "t1")
    [p] = col.search_profile_memory(filter={"user_id": "tu"})["data"]["result_list"]
    col.update_profile(p["profile_id"], {"likes": ["opera"]})  # a hand edit
    r = col.trigger_update_profile(update_profile_type="sys_profile_v1", filters={"user_id": "tu"})
    assert r["data"]["updated"] == 1
    [p] = col.search_profile_memory(filter={"user_id": "tu"})["data"]["result_list"]
    assert "jazz" in str(p["memory_info"]) and "opera" not in str(p["memory_info"])


def test_search_memory_and_resource_id(server):
    name = fresh()
    col = client(server).get_collection(collection_name=name)
    col.add_event("event_v1", {"summary": "Planning a trip to Kyoto in April"}, user_id="s1")
    col.add_profile("profile_v1", {"city": "Madrid"}, user_id="s1")
    r = col.search_memory(query="Kyoto trip", filter={"user_id": "s1"}, limit=5)["data"]["result_list"]
    assert [i["memory_category"] for i in r] == ["profile", "event"]
    only = col.search_memory(query="Kyoto", filter={"user_id": "s1", "memory_type": ["sys_profile_v1"]})
    assert [i["memory_category"] for i in only["data"]["result_list"]] == ["profile"]
    by_rid = client(server).get_collection(resource_id=f"default/{name}")
    assert by_rid.search_event_memory(query="Kyoto", filter={"user_id": "s1"})["data"]["result_list"]
    with pytest.raises(CollectionNotExistException):
        client(server).get_collection(resource_id="default/no_such_collection").get_session_info("x")
    with pytest.raises(InvalidRequestException):
        col.search_memory(query="x", filter={"user_id": "s1", "memory_type": ["no_such_type"]})


def test_every_async_method(server):
    col = client(server).get_collection(collection_name=fresh())

    async def run():
        await col.async_add_session("as1", [{"role": "user", "content": "I collect vintage stamps"}], metadata={"default_user_id": "au"})
        deadline = time.time() + 30
        while True:
            d = (await col.async_get_session_info("as1"))["data"]
            if d["jobs"] and all(j["state"] == "done" for j in d["jobs"]) or time.time() > deadline:
                break
            await asyncio.sleep(0.1)
        assert d["event_memory"][0]["user_id"] == ["au"]
        e = (await col.async_add_event("sys_event_v1", {"summary": "Visited the stamp fair"}, user_id="au"))["data"]
        await col.async_update_event(e["event_id"], {"summary": "Visited the big stamp fair"})
        hits = (await col.async_search_event_memory(query="stamp fair", filter={"user_id": "au"}))["data"]["result_list"]
        assert "big stamp fair" in hits[0]["memory_info"]["summary"]
        await col.async_delete_event(e["event_id"])
        await col.async_batch_delete_event(filter={"user_id": "au", "event_type": "event_v1"})
        assert (await col.async_search_event_memory(filter={"user_id": "au"}))["data"]["result_list"] == []
        p = (await col.async_add_profile("sys_profile_v1", {"hobby": "stamps"}, user_id="au2"))["data"]
        await col.async_update_profile(p["profile_id"], {"city": "Graz"})
        found = (await col.async_search_profile_memory(filter={"user_id": "au2"}))["data"]["result_list"]
        assert found[0]["memory_info"] == {"hobby": "stamps", "city": "Graz"}
        both = (await col.async_search_memory(query="stamps", filter={"user_id": "au2"}))["data"]["result_list"]
        assert both[0]["memory_category"] == "profile"
        assert (await col.async_trigger_update_profile(filters={"user_id": "au"}))["code"] == 0
        await col.async_delete_profile(p["profile_id"])
        await col.async_batch_delete_profile(filter={"user_id": "au"})
        assert (await col.async_search_profile_memory(filter={"user_id": "au"}))["data"]["result_list"] == []
        # The SDK's async path wraps every HTTP error in its own code 1000028 (a client-side
        # quirk), so only "it raised" can be checked there.
        with pytest.raises(VikingMemException):
            await col.async_add_profile("sys_profile_v1", {"x": 1}, user_id="au3", group_id="g")

    asyncio.run(run())
