"""A small program written against the SDK as a user would, checked by `mypy --strict` in
scripts/test-python (py.typed ships with the package): every call and answer is typed."""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List

from mnemo_client import APIKey, AsyncMemoryClient, ContextResponse, MemoryClient, MnemoError


def remember_and_recall(client: MemoryClient, user: str) -> str:
    col = client.get_collection("typed")
    written: Dict[str, Any] = col.streaming_write("c1", [{"role": "user", "content": "I live in Porto"}],
                                                  metadata={"user_id": user})
    assert isinstance(written["accepted"], int)
    ctx: ContextResponse = col.get_context("c1", query="where do I live?", max_tokens=400)
    jobs: List[Dict[str, Any]] = col.list_jobs(limit=5)
    return f"{ctx.context_str} ({ctx.token_count} tokens, {len(jobs)} jobs)"


async def recall_concurrently(host: str, key: str) -> List[int]:
    async with AsyncMemoryClient(host=host, auth=APIKey(api_key=key)) as client:
        col = client.get_collection("typed")
        try:
            found = await asyncio.gather(*[col.search_event_memory(query="Porto", filter={"user_id": "u"})
                                           for _ in range(3)])
        except MnemoError as e:
            return [e.code]
        ctx: ContextResponse = await col.get_context("c1", query="Porto")
        return [int(f["count"]) for f in found] + [ctx.token_count]
