"""The synchronous client: one HTTP POST per call, JSON in and out, retries on overload (standard
library only). `aio.py` is generated from this file (`scripts/gen-python-async`): edit here."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any, Dict, Iterable, List, Optional

from ._common import (
    DEFAULT_HOST,
    APIKey,
    ContextResponse,
    MnemoError,
    _base_url,
    _drop_none,
    _error,
    _pause,
    _payload,
    _retry_after,
    _unwrap,
)

__all__ = ["APIKey", "Collection", "ContextResponse", "MemoryClient", "MnemoError"]


class MemoryClient:
    """A client for one mnemo server.

    ``host`` may carry the scheme (``http://127.0.0.1:8600``); otherwise ``scheme`` is used
    (default ``https``, as for a remote service). ``region`` is accepted for compatibility and
    ignored. ``max_retries`` applies to 429, 5xx and connection failures.
    """

    def __init__(
        self,
        host: str = DEFAULT_HOST,
        region: Optional[str] = None,
        auth: Optional[APIKey] = None,
        scheme: Optional[str] = None,
        timeout: float = 30.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        api_key: Optional[str] = None,
    ):
        self.base_url = _base_url(host, scheme)
        self.region = region
        self.api_key = api_key or (auth.api_key if auth else None)
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff

    # --- transport (scripts/gen-python-async puts the asynchronous one here) ---

    def request(
        self,
        path: str,
        body: Dict[str, Any],
        headers: Optional[Dict[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> Dict[str, Any]:
        """POSTs ``body`` to ``/api/memory/<path>`` and returns ``data``; raises ``MnemoError``."""
        url = f"{self.base_url}/api/memory/{path.lstrip('/')}"
        payload, hdrs = _payload(self.api_key, body, headers)
        attempt = 0
        while True:
            req = urllib.request.Request(url, data=payload, headers=hdrs, method="POST")
            retry_after: Optional[float] = None
            try:
                with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
                    return _unwrap(resp.status, resp.read())
            except urllib.error.HTTPError as e:
                raw = e.read()
                if e.code != 429 and e.code < 500:
                    return _unwrap(e.code, raw)
                retry_after = _retry_after(e.headers.get("Retry-After"))
                failure = _error(e.code, raw)
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
                failure = MnemoError(f"{url}: {getattr(e, 'reason', e)}")
            if attempt >= self.max_retries:
                raise failure
            time.sleep(_pause(self.backoff, attempt, retry_after))
            attempt += 1

    def healthz(self) -> Dict[str, Any]:
        with urllib.request.urlopen(f"{self.base_url}/healthz", timeout=self.timeout) as resp:
            health: Dict[str, Any] = json.loads(resp.read().decode("utf-8"))
            return health

    # --- end transport ---

    # ------------------------------------------------------------------ collections

    def get_collection(self, collection_name: str, project_name: str = "default") -> "Collection":
        """A handle on a collection (no request is made; writes create it with the default schema)."""
        return Collection(self, collection_name, project_name)

    def create_collection(
        self,
        collection_name: str,
        project_name: str = "default",
        description: str = "",
        event_types: Optional[List[Dict[str, Any]]] = None,
        profile_types: Optional[List[Dict[str, Any]]] = None,
        **extra: Any,
    ) -> "Collection":
        body = _drop_none(
            {
                "collection_name": collection_name,
                "project_name": project_name,
                "description": description,
                "event_types": event_types,
                "profile_types": profile_types,
                **extra,
            }
        )
        self.request("collection/create", body)
        return Collection(self, collection_name, project_name)

    def list_collections(self, project_name: str = "default") -> List[Dict[str, Any]]:
        data = self.request("collection/list", {"project_name": project_name})
        collections: List[Dict[str, Any]] = data["collections"]
        return collections

    def delete_collection(self, collection_name: str, project_name: str = "default") -> None:
        self.request("collection/delete", {"collection_name": collection_name, "project_name": project_name})

    # ------------------------------------------------------------------ webhooks (admin keys)

    def create_webhook(
        self,
        url: str,
        events: Optional[List[str]] = None,
        secret: Optional[str] = None,
        description: str = "",
        project_name: str = "default",
    ) -> Dict[str, Any]:
        """Registers an endpoint for the project's changes; the answer's ``secret`` (generated
        unless given) is shown only here. Verify deliveries with ``mnemo_client.verify_webhook``."""
        body = _drop_none(
            {"project_name": project_name, "url": url, "events": events, "secret": secret, "description": description}
        )
        return self.request("webhook/create", body)

    def list_webhooks(self, project_name: str = "default") -> List[Dict[str, Any]]:
        data = self.request("webhook/list", {"project_name": project_name})
        webhooks: List[Dict[str, Any]] = data["webhooks"]
        return webhooks

    def delete_webhook(self, webhook_id: str, project_name: str = "default") -> None:
        self.request("webhook/delete", {"project_name": project_name, "webhook_id": webhook_id})

    def list_webhook_deliveries(
        self,
        webhook_id: Optional[str] = None,
        state: Optional[str] = None,
        limit: Optional[int] = None,
        project_name: str = "default",
    ) -> List[Dict[str, Any]]:
        """Deliveries, newest first; ``state`` is pending, delivered or dead (dead letters)."""
        body = _drop_none({"project_name": project_name, "webhook_id": webhook_id, "state": state, "limit": limit})
        data = self.request("webhook/deliveries", body)
        deliveries: List[Dict[str, Any]] = data["deliveries"]
        return deliveries

    def redeliver_webhook(
        self, webhook_id: str, delivery_ids: Optional[List[int]] = None, project_name: str = "default"
    ) -> List[int]:
        """Dead deliveries of the endpoint (all, or those listed) back in the queue."""
        body = _drop_none({"project_name": project_name, "webhook_id": webhook_id, "delivery_ids": delivery_ids})
        data = self.request("webhook/redeliver", body)
        redelivered: List[int] = data["redelivered"]
        return redelivered


class Collection:
    """One collection; every method is one API call and returns the answer's ``data``."""

    def __init__(self, client: MemoryClient, collection_name: str, project_name: str = "default"):
        self.client = client
        self.collection_name = collection_name
        self.project_name = project_name

    def _call(
        self,
        path: str,
        body: Dict[str, Any],
        headers: Optional[Dict[str, str]] = None,
        timeout: Optional[float] = None,
        project_name: Optional[str] = None,
    ) -> Dict[str, Any]:
        full = {"collection_name": self.collection_name, "project_name": project_name or self.project_name}
        full.update(_drop_none(body))
        return self.client.request(path, full, headers=headers, timeout=timeout)

    def info(self) -> Dict[str, Any]:
        """The collection's schema, embedding model and sizes."""
        return self._call("collection/info", {})

    # ------------------------------------------------------------------ writing

    def streaming_write(
        self,
        conversation_id: str,
        messages: Iterable[Dict[str, Any]],
        extract_trigger: Optional[Dict[str, Any]] = None,
        metadata: Optional[Dict[str, Any]] = None,
        headers: Optional[Dict[str, str]] = None,
        timeout: Optional[float] = None,
        project_name: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Streams turns into the conversation; a trigger closes a session for extraction."""
        body = {
            "conversation_id": conversation_id,
            "messages": list(messages),
            "extract_trigger": extract_trigger,
            "metadata": metadata,
        }
        return self._call("session/streaming_write", body, headers, timeout, project_name)

    def session_add(
        self,
        conversation_id: Optional[str] = None,
        messages: Iterable[Dict[str, Any]] = (),
        metadata: Optional[Dict[str, Any]] = None,
        headers: Optional[Dict[str, str]] = None,
        timeout: Optional[float] = None,
        project_name: Optional[str] = None,
        session_id: Optional[str] = None,
        **extra: Any,
    ) -> Dict[str, Any]:
        """Writes a whole session at once (batch); it is extracted right away. Give mnemo's
        ``conversation_id`` (a session added to it) or VikingDB's ``session_id`` (generated when
        both are absent; a re-used one replaces that session). ``extra``: ``extract_memory_type``,
        ``ttl_relative``, ``ttl_absolute``…"""
        body = {
            "conversation_id": conversation_id,
            "session_id": session_id,
            "messages": list(messages),
            "metadata": metadata,
            **extra,
        }
        return self._call("session/add", body, headers, timeout, project_name)

    def flush(self, conversation_id: str, headers: Optional[Dict[str, str]] = None, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Closes the conversation's open messages into a session now."""
        return self._call("session/flush", {"conversation_id": conversation_id}, headers, timeout)

    def delete_conversation(self, conversation_id: str) -> Dict[str, Any]:
        """Deletes a conversation (messages, sessions, events) and withdraws its profile changes."""
        return self._call("session/delete", {"conversation_id": conversation_id})

    def session_info(self, conversation_id: Optional[str] = None, session_id: Optional[str] = None) -> Dict[str, Any]:
        return self._call("session/info", {"conversation_id": conversation_id, "session_id": session_id})

    # ------------------------------------------------------------------ reading

    def get_context(
        self,
        conversation_id: str,
        query: Optional[str] = None,
        event_search_config: Optional[Dict[str, Any]] = None,
        profile_search_config: Optional[Dict[str, Any]] = None,
        project_name: Optional[str] = None,
        max_tokens: Optional[int] = None,
        headers: Optional[Dict[str, str]] = None,
        timeout: Optional[float] = None,
        as_of: Optional[int] = None,
        **extra: Any,
    ) -> ContextResponse:
        """The prompt-ready memory for the next LLM call, within ``max_tokens`` (``as_of``: what
        was true at that time, in ms since the epoch)."""
        body = {
            "conversation_id": conversation_id,
            "query": query,
            "event_search_config": event_search_config,
            "profile_search_config": profile_search_config,
            "max_tokens": max_tokens,
            "as_of": as_of,
            **extra,
        }
        data = self._call("get_context", body, headers, timeout, project_name)
        return ContextResponse(
            context_str=data.get("context_str", ""),
            context_parts=data.get("context_parts", {}) or {},
            token_count=data.get("token_count", 0),
            raw=data,
        )

    def search_event_memory(
        self,
        query: Optional[str] = None,
        filter: Optional[Dict[str, Any]] = None,
        time_decay_config: Optional[Dict[str, Any]] = None,
        limit: Optional[int] = None,
        headers: Optional[Dict[str, str]] = None,
        timeout: Optional[float] = None,
        as_of: Optional[int] = None,
        **extra: Any,
    ) -> Dict[str, Any]:
        """Semantic (hybrid) search with a query; the newest events matching ``filter`` without
        (``as_of``: the events true at that time, superseded ones included)."""
        body = {
            "query": query,
            "filter": filter,
            "time_decay_config": time_decay_config,
            "limit": limit,
            "as_of": as_of,
            **extra,
        }
        return self._call("event/search", body, headers, timeout)

    def search_profile_memory(
        self,
        filter: Optional[Dict[str, Any]] = None,
        limit: Optional[int] = None,
        as_of: Optional[int] = None,
        **extra: Any,
    ) -> Dict[str, Any]:
        """The user's profiles (``as_of``: each value as it was at that time, ms since the epoch)."""
        return self._call("profile/search", {"filter": filter or {}, "limit": limit, "as_of": as_of, **extra})

    def list_entities(
        self,
        user_id: str,
        kind: Optional[str] = None,
        name: Optional[str] = None,
        limit: Optional[int] = None,
    ) -> Dict[str, Any]:
        """The people, places, organisations and pets the user's memories name, most events first
        (``kind``: person, place, organization, pet or other; ``name``: part of a name or alias)."""
        flt: Dict[str, Any] = {"user_id": user_id, "kind": kind, "name": name}
        return self._call("entity/list", {"filter": {k: v for k, v in flt.items() if v is not None}, "limit": limit})

    def get_entity(self, user_id: str, entity: str, limit: Optional[int] = None) -> Dict[str, Any]:
        """One of the user's entities (its ``entity_id``, name or an alias) and its events, newest first."""
        return self._call("entity/get", {"user_id": user_id, "entity": entity, "limit": limit})

    # ------------------------------------------------------------------ events

    def add_event(
        self,
        event_type: str,
        user_id: Any = None,
        assistant_id: Any = None,
        memory_info: Optional[Dict[str, Any]] = None,
        headers: Optional[Dict[str, str]] = None,
        timeout: Optional[float] = None,
        **extra: Any,
    ) -> Dict[str, Any]:
        body = {
            "event_type": event_type,
            "user_id": user_id,
            "assistant_id": assistant_id,
            "memory_info": memory_info or {},
            **extra,
        }
        return self._call("event/add", body, headers, timeout)

    def add_events(self, events: List[Dict[str, Any]], headers: Optional[Dict[str, str]] = None, timeout: Optional[float] = None) -> Dict[str, Any]:
        """1 to 500 events (each as `add_event` takes it: event_type, user_id, memory_info, …)
        at once: all stored in one transaction, or none if any is invalid (the error names it,
        e.g. ``events[3].memory_info``). Returns ``{"count", "event_ids"}``."""
        return self._call("event/batch_add", {"events": events}, headers, timeout)

    def update_event(self, event_id: str, **fields: Any) -> Dict[str, Any]:
        return self._call("event/update", {"event_id": event_id, **fields})

    def delete_event(self, event_id: str) -> Dict[str, Any]:
        return self._call("event/delete", {"event_id": event_id})

    def batch_delete_event(
        self,
        filter: Dict[str, Any],
        delete_type: Optional[str] = None,
        headers: Optional[Dict[str, str]] = None,
        timeout: Optional[float] = None,
        dry_run: Optional[bool] = None,
        confirm: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Deletes the events matching ``filter``. A filter of only user_id/assistant_id selects all
        of that user's events and needs ``confirm="all"``; ``dry_run=True`` answers what would be
        deleted (``would_delete``, ``event_ids``) without deleting."""
        body = {"filter": filter, "delete_type": delete_type, "dry_run": dry_run, "confirm": confirm}
        return self._call("event/batch_delete", body, headers, timeout)

    # ------------------------------------------------------------------ profiles

    def add_profile(
        self, user_id: str, attributes: Optional[Dict[str, Any]] = None, profile_type: Optional[str] = None, content: Optional[str] = None, assistant_id: Any = None
    ) -> Dict[str, Any]:
        body = {
            "user_id": user_id,
            "attributes": attributes or {},
            "profile_type": profile_type,
            "content": content,
            "assistant_id": assistant_id,
        }
        return self._call("profile/add", body)

    def update_profile(
        self, profile_id: str, attributes: Optional[Dict[str, Any]] = None, content: Optional[str] = None, replace_attributes: Optional[bool] = None
    ) -> Dict[str, Any]:
        body = {
            "profile_id": profile_id,
            "attributes": attributes,
            "content": content,
            "replace_attributes": replace_attributes,
        }
        return self._call("profile/update", body)

    def delete_profile(self, profile_id: str) -> Dict[str, Any]:
        return self._call("profile/delete", {"profile_id": profile_id})

    def batch_delete_profile(self, filter: Dict[str, Any]) -> Dict[str, Any]:
        """Deletes the profiles matching a filter that names a user_id or assistant_id."""
        return self._call("profile/batch_delete", {"filter": filter})

    def trigger_update_profile(self, filters: Dict[str, Any], update_profile_type: Optional[str] = None) -> Dict[str, Any]:
        """Re-derives the matching profiles from the sessions they came from."""
        return self._call("profile/trigger_update", {"filters": filters, "update_profile_type": update_profile_type})

    def search_memory(
        self,
        query: Optional[str] = None,
        filter: Optional[Dict[str, Any]] = None,
        limit: Optional[int] = None,
        as_of: Optional[int] = None,
    ) -> Dict[str, Any]:
        """Profiles and events of a user at once (VikingDB's SearchMemory); each item's memory_category says which."""
        return self._call("search", {"query": query, "filter": filter, "limit": limit, "as_of": as_of})

    # ------------------------------------------------------------------ users, jobs, stats

    def list_users(self, contains: Optional[str] = None, limit: Optional[int] = None) -> List[Dict[str, Any]]:
        """The collection's users, most recently active first: ``user_id``, ``event_count``,
        ``conversation_count``, ``last_active`` (ms); ``contains``: part of the id."""
        data = self._call("user/list", {"contains": contains, "limit": limit})
        users: List[Dict[str, Any]] = data["users"]
        return users

    def export_user(self, user_id: str) -> Dict[str, Any]:
        """Everything stored about the user in this collection, grouped by kind:
        ``{"header", "conversations", "messages", "sessions", "jobs", "events", "profiles"}``."""
        return self._call("user/export", {"user_id": user_id})

    def forget_user(self, user_id: str, dry_run: Optional[bool] = None) -> Dict[str, Any]:
        """Deletes everything stored about the user in this collection, for good (``dry_run=True``:
        only counts what that would be)."""
        return self._call("user/forget", {"user_id": user_id, "dry_run": dry_run})

    def list_jobs(
        self, state: Optional[str] = None, conversation_id: Optional[str] = None, limit: Optional[int] = None
    ) -> List[Dict[str, Any]]:
        data = self._call("job/list", {"state": state, "conversation_id": conversation_id, "limit": limit})
        jobs: List[Dict[str, Any]] = data["jobs"]
        return jobs

    def retry_jobs(self, job_id: Optional[str] = None) -> List[str]:
        """Puts a failed job (or, without ``job_id``, every failed job of the collection) back in the
        queue from its first attempt; returns the ids re-queued."""
        data = self._call("job/retry", {"job_id": job_id})
        retried: List[str] = data["retried"]
        return retried

    def stats(self, user_id: Optional[str] = None, days: Optional[int] = None) -> Dict[str, Any]:
        return self._call("stats", {"user_id": user_id, "days": days})
