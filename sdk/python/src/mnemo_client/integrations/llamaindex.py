"""A LlamaIndex memory block (``pip install mnemo-client[llamaindex]``): mnemo's prompt-ready
context inside LlamaIndex's ``Memory``, and the turns LlamaIndex flushes out of its short-term
memory written to mnemo.

    from llama_index.core.memory import Memory
    memory = Memory.from_defaults(session_id="chat-1", memory_blocks=[
        MnemoMemoryBlock(collection=collection, conversation_id="chat-1", user_id="ana")])
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, List, Optional

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory.memory import BaseMemoryBlock

_ROLE = {"user": "user", "assistant": "assistant", "system": "system", "tool": "tool", "chatbot": "assistant", "model": "assistant"}


class MnemoMemoryBlock(BaseMemoryBlock[str]):
    """``aget``: mnemo's ``get_context`` for the latest user message (profile, recent turns, this
    and other conversations' events) within ``max_tokens``. ``aput``: the messages written to the
    conversation (extraction follows mnemo's trigger)."""

    name: str = "mnemo"
    description: Optional[str] = "Long-term memory of the user from mnemo"
    collection: Any
    conversation_id: str
    user_id: Optional[str] = None
    max_tokens: int = 1200

    def _filter(self) -> Optional[dict]:
        return {"filter": {"user_id": self.user_id}} if self.user_id else None

    async def _aget(self, messages: Optional[List[ChatMessage]] = None, **block_kwargs: Any) -> str:
        query = next((m.content for m in reversed(messages or []) if m.role.value == "user" and m.content), None)
        ctx = await _call(
            self.collection.get_context,
            conversation_id=self.conversation_id,
            query=query,
            max_tokens=self.max_tokens,
            event_search_config=self._filter(),
            profile_search_config=self._filter(),
        )
        return ctx.context_str

    async def _aput(self, messages: List[ChatMessage]) -> None:
        turns = [
            {"role": _ROLE.get(m.role.value, "user"), "content": m.content}
            for m in messages
            if isinstance(m.content, str) and m.content.strip()
        ]
        if turns:
            meta = {"user_id": self.user_id} if self.user_id else None
            await _call(
                self.collection.streaming_write, conversation_id=self.conversation_id, messages=turns, metadata=meta
            )


async def _call(method: Any, **kwargs: Any) -> Any:
    """A collection's method: awaited on an ``AsyncCollection``, on a worker thread otherwise."""
    if inspect.iscoroutinefunction(method):
        return await method(**kwargs)
    return await asyncio.to_thread(method, **kwargs)
