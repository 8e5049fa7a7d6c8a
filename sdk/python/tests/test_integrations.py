"""The framework adapters (optional extras) against the real binary: LangChain's chat message
history and retriever, LlamaIndex's memory block inside its ``Memory``. Each is skipped, with the
reason printed, only where its framework cannot be installed."""

import asyncio
import time
import uuid

import pytest


def wait_extracted(col, conversation_id, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        jobs = col.list_jobs(conversation_id=conversation_id)
        if jobs and all(j["state"] == "done" for j in jobs):
            return
        time.sleep(0.1)
    raise AssertionError(f"{conversation_id} was not extracted")


def test_langchain_history_and_retriever(client):
    pytest.importorskip("langchain_core", reason="langchain-core is not installed (pip install mnemo-client[langchain])")
    from mnemo_client.integrations.langchain import MnemoChatMessageHistory, MnemoRetriever

    col = client.get_collection("lc_" + uuid.uuid4().hex[:8])
    history = MnemoChatMessageHistory(col, conversation_id="lc1", user_id="ana", extract_trigger={"message_count": 2})
    assert history.messages == []
    history.add_user_message("I am training for the Lisbon marathon in October")
    history.add_ai_message("Great goal, good luck with the training!")
    wait_extracted(col, "lc1")
    history.add_user_message("Any tips for long runs?")
    said = [(m.type, m.content) for m in history.messages]
    assert said == [
        ("human", "I am training for the Lisbon marathon in October"),
        ("ai", "Great goal, good luck with the training!"),
        ("human", "Any tips for long runs?"),
    ], "extracted and pending turns, in order"
    docs = MnemoRetriever(collection=col, user_id="ana", k=3).invoke("when is the marathon?")
    assert docs and "marathon" in docs[0].page_content and docs[0].metadata["user_id"] == ["ana"]
    history.clear()
    assert history.messages == []
    assert MnemoRetriever(collection=col, user_id="ana").invoke("marathon") == [], "its memories went with it"


def test_llamaindex_memory_block(client):
    pytest.importorskip("llama_index.core", reason="llama-index-core is not installed (pip install mnemo-client[llamaindex])")
    from llama_index.core.base.llms.types import ChatMessage
    from llama_index.core.memory import Memory
    from mnemo_client.integrations.llamaindex import MnemoMemoryBlock

    col = client.get_collection("li_" + uuid.uuid4().hex[:8])
    block = MnemoMemoryBlock(collection=col, conversation_id="li1", user_id="bo", max_tokens=500)
    # Offline: a whitespace tokenizer instead of tiktoken's downloaded encodings.
    memory = Memory.from_defaults(session_id="li1", memory_blocks=[block], tokenizer_fn=str.split)

    async def run():
        await block.aput([ChatMessage(role="user", content="My daughter Mia is allergic to peanuts"),
                          ChatMessage(role="assistant", content="Noted: no peanuts for Mia.")])
        col.flush("li1")
        await asyncio.to_thread(wait_extracted, col, "li1")
        await memory.aput(ChatMessage(role="user", content="What snacks can I pack for Mia?"))
        return await memory.aget()

    history = asyncio.run(run())
    system = "\n".join(str(m.content) for m in history if m.role.value == "system")
    assert "<mnemo>" in system and "peanut" in system, system
    assert history[-1].content == "What snacks can I pack for Mia?"
