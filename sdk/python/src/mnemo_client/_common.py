"""What the synchronous and the asynchronous clients share: errors, answers, and the wire rules."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

DEFAULT_HOST = "http://127.0.0.1:8600"


class MnemoError(Exception):
    """An error answer from mnemo (or a transport failure after the retries).

    ``code`` is mnemo's error code (HTTP status × 100; 0 for transport failures), ``message`` names
    the offending field and the allowed range, ``request_id`` identifies the request in the
    server's log, ``status`` is the HTTP status (0 when no answer came).
    """

    def __init__(self, message: str, code: int = 0, request_id: str = "", status: int = 0):
        super().__init__(f"{message} (code {code}, request_id {request_id or '-'})")
        self.message = message
        self.code = code
        self.request_id = request_id
        self.status = status


@dataclass
class APIKey:
    """A bearer key (``server.api_keys`` on the server); not needed on a loopback server without keys."""

    api_key: str


@dataclass
class ContextResponse:
    """What ``get_context`` returns: the prompt-ready string and its structured parts."""

    context_str: str
    context_parts: Dict[str, Any] = field(default_factory=dict)
    token_count: int = 0
    raw: Dict[str, Any] = field(default_factory=dict)

    @property
    def short_term_memory(self) -> List[Dict[str, Any]]:
        return list(self.context_parts.get("short_term_memory", []))

    @property
    def profiles(self) -> List[Dict[str, Any]]:
        return list(self.context_parts.get("profiles", []))

    @property
    def events(self) -> List[Dict[str, Any]]:
        parts = self.context_parts
        return list(parts.get("intra_conversation_events", [])) + list(parts.get("cross_conversation_events", []))

    def __str__(self) -> str:
        return self.context_str


def _base_url(host: str, scheme: Optional[str]) -> str:
    host = host.rstrip("/")
    if host.startswith("http://") or host.startswith("https://"):
        return host
    return f"{scheme or 'https'}://{host}"


def _drop_none(d: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _export_lines(text: str) -> Dict[str, Any]:
    """`user/export` answers JSON lines: a header, then `{"kind", "collection_name", "record"}` per
    record. Grouped here by kind: {"header": …, "events": […], "profiles": […], "messages": […], …}."""
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    out: Dict[str, Any] = {"header": lines[0] if lines else {}}
    for kind in ("conversation", "message", "session", "job", "event", "profile"):
        out[kind + "s"] = []
    for rec in lines[1:]:
        out.setdefault(rec.get("kind", "record") + "s", []).append(rec.get("record"))
    return out


def _retry_after(v: Optional[str]) -> Optional[float]:
    try:
        return float(v) if v is not None else None
    except ValueError:
        return None


def _error(status: int, raw: bytes) -> MnemoError:
    try:
        v = json.loads(raw.decode("utf-8"))
        return MnemoError(v.get("message", ""), v.get("code", status * 100), v.get("request_id", ""), status)
    except (ValueError, UnicodeDecodeError, AttributeError):
        return MnemoError(raw[:200].decode("utf-8", "replace"), status * 100, "", status)


def _unwrap(status: int, raw: bytes) -> Dict[str, Any]:
    """An answer's ``data``, or the error it carries."""
    if status >= 400:
        raise _error(status, raw)
    text = raw.decode("utf-8")
    try:
        v = json.loads(text)
    except ValueError:
        return _export_lines(text)  # JSON lines (user/export)
    if v.get("kind") == "export":
        return _export_lines(text)
    if v.get("code", 0) != 0:
        raise MnemoError(v.get("message", ""), v.get("code", 0), v.get("request_id", ""), status)
    data: Dict[str, Any] = v.get("data") or {}
    return data


def _payload(client_api_key: Optional[str], body: Dict[str, Any], headers: Optional[Dict[str, str]]) -> "tuple[bytes, Dict[str, str]]":
    """The request's bytes and headers."""
    payload = json.dumps(body, ensure_ascii=False).encode("utf-8")
    hdrs = {"Content-Type": "application/json", "Accept": "application/json"}
    if client_api_key:
        hdrs["Authorization"] = f"Bearer {client_api_key}"
    hdrs.update(headers or {})
    return payload, hdrs


def _pause(backoff: float, attempt: int, retry_after: Optional[float]) -> float:
    """How long to wait before retry ``attempt`` (``Retry-After`` wins), at most 30 s."""
    pause = retry_after if retry_after is not None else backoff * (2**attempt) * (0.5 + random.random())
    return min(pause, 30.0)
