"""LangChain adapters (``pip install mnemo-client[langchain]``): a chat message history kept in
mnemo (turns stream in, extraction runs in the background) and a retriever over a user's memories.

    history = MnemoChatMessageHistory(collection, conversation_id="chat-1", user_id="ana")
    retriever = MnemoRetriever(collection=collection, user_id="ana", k=5)
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.retrievers import BaseRetriever

from ..client import Collection, MnemoError

_ROLE = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}


def _to_langchain(m: Dict[str, Any]) -> BaseMessage:
    cls = {"user": HumanMessage, "assistant": AIMessage}.get(m["role"], SystemMessage)
    return cls(content=m["content"], additional_kwargs={"message_id": m.get("message_id"), "time": m.get("time")})


class MnemoChatMessageHistory(BaseChatMessageHistory):
    """A conversation's messages in mnemo. ``messages`` is the whole conversation, extracted
    sessions and pending turns, oldest first; ``add_messages`` streams turns in (mnemo's trigger
    closes sessions and extracts memories); ``clear`` deletes the conversation, its memories and
    what it changed in the user's profile."""

    def __init__(
        self,
        collection: Collection,
        conversation_id: str,
        user_id: Optional[str] = None,
        assistant_id: Optional[str] = None,
        extract_trigger: Optional[Dict[str, Any]] = None,
    ):
        self.collection = collection
        self.conversation_id = conversation_id
        self.metadata = {k: v for k, v in {"user_id": user_id, "assistant_id": assistant_id}.items() if v}
        self.extract_trigger = extract_trigger

    @property
    def messages(self) -> List[BaseMessage]:  # type: ignore[override]
        try:
            info = self.collection.session_info(conversation_id=self.conversation_id)
        except MnemoError as e:
            if e.status == 404:
                return []
            raise
        found: Dict[int, Dict[str, Any]] = {m["message_id"]: m for m in info.get("messages", [])}
        for s in info.get("sessions", []):
            for m in self.collection.session_info(session_id=s["session_id"]).get("messages", []):
                found.setdefault(m["message_id"], m)
        return [_to_langchain(found[k]) for k in sorted(found)]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        turns = []
        for m in messages:
            content = m.content if isinstance(m.content, str) else "\n".join(
                p if isinstance(p, str) else str(p.get("text", "")) for p in m.content
            )
            if content.strip():
                turns.append({"role": _ROLE.get(m.type, "user"), "content": content})
        if turns:
            self.collection.streaming_write(
                conversation_id=self.conversation_id,
                messages=turns,
                extract_trigger=self.extract_trigger,
                metadata=self.metadata or None,
            )

    def clear(self) -> None:
        try:
            self.collection.delete_conversation(self.conversation_id)
        except MnemoError as e:
            if e.status != 404:
                raise


class MnemoRetriever(BaseRetriever):
    """The user's (or assistant's) memories most relevant to a query, as Documents: events ranked
    by mnemo's hybrid search (``page_content`` is the memory's text; ``metadata`` its id, type,
    time, score and conversation)."""

    collection: Any
    user_id: Optional[str] = None
    assistant_id: Optional[str] = None
    k: int = 5
    filter: Dict[str, Any] = {}

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> List[Document]:
        flt = dict(self.filter)
        if self.user_id:
            flt["user_id"] = self.user_id
        if self.assistant_id:
            flt["assistant_id"] = self.assistant_id
        found = self.collection.search_event_memory(query=query, filter=flt, limit=self.k)
        docs = []
        for e in found.get("result_list", []):
            info = e.get("memory_info", {})
            text = info.get("summary") or "; ".join(f"{k}: {v}" for k, v in info.items() if k != "original_messages")
            meta = {k: e.get(k) for k in ("event_id", "memory_type", "time", "score", "conversation_id", "user_id")}
            docs.append(Document(page_content=text, metadata=meta))
        return docs
