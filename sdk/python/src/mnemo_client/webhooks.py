"""Verifying mnemo's webhook deliveries (Standard Webhooks: https://www.standardwebhooks.com/).

Each delivery carries ``webhook-id`` (``msg_<n>``, the same on every retry: deduplicate on it),
``webhook-timestamp`` (Unix seconds) and ``webhook-signature`` (``v1,<base64 HMAC-SHA256 of
"id.timestamp.body">``, keyed with the secret's base64 part when it starts with ``whsec_``, else
with its bytes). Any Standard Webhooks library verifies it too (``standardwebhooks``, ``svix``).
"""

import base64
import binascii
import hashlib
import hmac
import json
import time
from typing import Any, Mapping, Optional, Union


class WebhookVerificationError(Exception):
    pass


def _key(secret: str) -> bytes:
    if secret.startswith("whsec_"):
        try:
            return base64.b64decode(secret[len("whsec_"):], validate=True)
        except (binascii.Error, ValueError):
            pass
    return secret.encode("utf-8")


def sign(secret: str, msg_id: str, timestamp: int, body: Union[str, bytes]) -> str:
    """The ``webhook-signature`` mnemo sends for this delivery."""
    raw = body if isinstance(body, bytes) else body.encode("utf-8")
    mac = hmac.new(_key(secret), f"{msg_id}.{timestamp}.".encode("utf-8") + raw, hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode("ascii")


def verify_webhook(
    secret: str,
    body: Union[str, bytes],
    headers: Mapping[str, str],
    tolerance: int = 300,
    now: Optional[float] = None,
) -> Any:
    """Checks a delivery's signature and timestamp (within ``tolerance`` seconds, against replays)
    and returns the parsed body ``{"type", "timestamp", "data"}``; raises
    ``WebhookVerificationError`` otherwise."""
    h = {k.lower(): v for k, v in headers.items()}
    msg_id, ts, sigs = h.get("webhook-id"), h.get("webhook-timestamp"), h.get("webhook-signature")
    if not (msg_id and ts and sigs):
        raise WebhookVerificationError("missing webhook-id, webhook-timestamp or webhook-signature")
    try:
        stamp = int(ts)
    except ValueError:
        raise WebhookVerificationError(f"bad webhook-timestamp {ts!r}")
    if abs((now if now is not None else time.time()) - stamp) > tolerance:
        raise WebhookVerificationError("webhook-timestamp is outside the tolerance (a replay?)")
    expected = sign(secret, msg_id, stamp, body)
    if not any(hmac.compare_digest(expected, s) for s in sigs.split(" ")):
        raise WebhookVerificationError("no signature matches (wrong secret or changed body)")
    return json.loads(body)
