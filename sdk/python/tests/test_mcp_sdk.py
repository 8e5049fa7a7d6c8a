"""The official MCP Python SDK (`mcp`, pinned in scripts/test-python) against the real binary, over
stdio (`mnemo mcp`) and streamable HTTP (`/mcp` of `mnemo serve`): what an agent remembers in one
conversation is recalled in the next, noise stays below the relevance floor, and bad tool arguments
are tool errors the model reads (MCP 2025-11-25)."""

import asyncio
import os
import pathlib
import tempfile

import pytest

mcp = pytest.importorskip("mcp", reason="the MCP SDK is installed by scripts/test-python")
from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
import httpx2  # noqa: E402  (the SDK's HTTP client)
from mcp.shared.exceptions import MCPError  # noqa: E402

from conftest import _binary, store_env  # noqa: E402


def text(result) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "text", None))


async def agent_session(client_factory):
    # Conversation 1: the agent remembers what the user says.
    async with client_factory("trip") as c:
        tools = await c.list_tools()
        assert [t.name for t in tools.tools] == ["remember", "recall", "search_memory", "add_memory", "forget_memory"]
        r = await c.call_tool("remember", {"content": "我叫李雷，对花生过敏"})
        assert not r.is_error and "extracted into long-term memory" in text(r), text(r)
        r = await c.call_tool("remember", {"content": "I am planning a trip to Kyoto next April"})
        assert not r.is_error, text(r)
        await c.call_tool("add_memory", {"summary": "Debugging a Rust borrow-checker error in the parser"})
        # Batched turns wait as short-term memory until the conversation ends.
        r = await c.call_tool("remember", {"content": "My sister lives in Lisbon", "batched": True})
        assert "(1 turn waiting)" in text(r), text(r)
        r = await c.call_tool("remember", {"content": "She is a nurse", "batched": True, "end_conversation": True})
        assert "extracted into long-term memory (2 turns)" in text(r), text(r)
        # Input validation failures are tool results the model reads (MCP 2025-11-25), naming the
        # argument: unknown, out of range, ill-typed, missing.
        for args, says in [
            ({"query": "x", "limt": 3}, "limt: unknown argument; the arguments of search_memory are as_of, limit, query"),
            ({"query": "x", "limit": 99}, "limit: must be an integer in 1..=50, got 99"),
            ({"query": 7}, "query: must be a string, got 7"),
            ({}, "query: is required"),
        ]:
            r = await c.call_tool("search_memory", args)
            assert r.is_error and text(r).startswith(says), (args, text(r))
        r = await c.call_tool("remember", {"content": "x", "role": "system"})
        assert r.is_error and text(r).startswith('role: must be one of "user", "assistant"'), text(r)
        # An unknown tool stays a protocol error.
        with pytest.raises(MCPError):
            await c.call_tool("no_such_tool", {})
    # Conversation 2 (a new session, another conversation id): recall finds it at once.
    async with client_factory("next") as c:
        r = await c.call_tool("search_memory", {"query": "花生过敏"})
        assert "花生" in text(r), text(r)
        r = await c.call_tool("recall", {"query": "我对什么过敏？"})
        assert "花生" in text(r) and "Rust" not in text(r), text(r)
        r = await c.call_tool("search_memory", {"query": "Japan trip Kyoto"})
        assert "Kyoto" in text(r) and "Rust" not in text(r), text(r)
        assert "relevance floor" in text(r)
        r = await c.call_tool("search_memory", {"query": "quantum chromodynamics lecture"})
        assert text(r).startswith("Nothing relevant"), text(r)


def test_stdio_remember_then_recall_in_the_next_conversation():
    with tempfile.TemporaryDirectory() as d:
        def factory(conversation):
            params = StdioServerParameters(
                command=_binary(),
                args=["mcp", "--data", str(pathlib.Path(d) / "data"), "--user", "lilei"],
                env={"MNEMO_MCP__CONVERSATION_ID": conversation, "MNEMO_LOG": "warn", **store_env(d)},
            )
            return Client(params)

        asyncio.run(agent_session(factory))


def test_http_remember_then_recall_in_the_next_conversation(server):
    def factory(conversation):
        headers = {
            "Authorization": f"Bearer {server.key}",
            "X-Mnemo-Collection": "agent",
            "X-Mnemo-User": "lilei",
            "X-Mnemo-Conversation": conversation,
        }
        transport = streamable_http_client(f"{server.url}/mcp", http_client=httpx2.AsyncClient(headers=headers, timeout=30))
        return Client(transport)

    asyncio.run(agent_session(factory))


def test_http_requires_the_user_header(server):
    async def go():
        headers = {"Authorization": f"Bearer {server.key}"}
        transport = streamable_http_client(f"{server.url}/mcp", http_client=httpx2.AsyncClient(headers=headers, timeout=30))
        async with Client(transport) as c:
            r = await c.call_tool("remember", {"content": "to whom?"})
            assert r.is_error and "X-Mnemo-User" in text(r), text(r)

    asyncio.run(go())
