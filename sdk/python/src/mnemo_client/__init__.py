"""Python client for mnemo, a memory service for LLM applications.

The client mirrors the VikingDB memory SDK used in mnemo's seed documents: ``get_collection``,
``streaming_write``, ``get_context``, ``search_event_memory``, ``add_event``, ``batch_delete_event``…
so that code written for it runs against mnemo with only the host and the key changed.
"""

from .client import APIKey, Collection, ContextResponse, MemoryClient, MnemoError
from .aio import AsyncCollection, AsyncMemoryClient
from .webhooks import WebhookVerificationError, verify_webhook

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
