"""Python client for mnemo, a memory service for LLM applications.

The client mirrors the VikingDB memory SDK used in mnemo's seed documents: ``get_collection``,
``streaming_write``, ``get_context``, ``search_event_memory``, ``add_event``, ``batch_delete_event``…
so that code written for it runs against mnemo with only the host and the key changed.
"""

from typing import TYPE_CHECKING, Any

from .client import APIKey, Collection, ContextResponse, MemoryClient, MnemoError
from .webhooks import WebhookVerificationError, verify_webhook

if TYPE_CHECKING:
    from .aio import AsyncCollection, AsyncMemoryClient


def __getattr__(name: str) -> Any:
    # The asyncio client needs httpx (the `async` extra); the synchronous one only the stdlib.
    if name in ("AsyncCollection", "AsyncMemoryClient"):
        from . import aio

        return getattr(aio, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


VikingMem = MemoryClient

__all__ = [
    "APIKey",
    "AsyncCollection",
    "AsyncMemoryClient",
    "Collection",
    "ContextResponse",
    "MemoryClient",
    "MnemoError",
    "VikingMem",
    "WebhookVerificationError",
    "verify_webhook",
]
__version__ = "0.1.0"
