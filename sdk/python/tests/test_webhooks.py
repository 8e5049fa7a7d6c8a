"""Webhooks end to end: an endpoint registered through the SDK receives the project's changes,
signed so that both mnemo_client.verify_webhook and the reference Standard Webhooks library
(`standardwebhooks`, PyPI) accept them, and neither accepts a wrong secret or a changed body."""

import http.server
import json
import threading
import time

import pytest

from mnemo_client import WebhookVerificationError, verify_webhook

standardwebhooks = pytest.importorskip("standardwebhooks.webhooks", reason="standardwebhooks is not installed")


class _Receiver(http.server.BaseHTTPRequestHandler):
    got = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Receiver.got.append(({k.lower(): v for k, v in self.headers.items()}, body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_deliveries_verify_with_the_reference_library(client):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/hook"
    hook = client.create_webhook(url, events=["memory.created", "memory.deleted"], description="pytest")
    try:
        secret = hook["secret"]
        assert secret.startswith("whsec_")
        assert [w["webhook_id"] for w in client.list_webhooks() if w["url"] == url] == [hook["webhook_id"]]
        coll = client.get_collection("py_webhooks")
        added = coll.add_event("event_v1", user_id="dana", memory_info={"summary": "dana restores old clocks"})
        coll.delete_event(added["event_id"])
        deadline = time.time() + 20
        while len(_Receiver.got) < 2 and time.time() < deadline:
            time.sleep(0.05)
        assert len(_Receiver.got) == 2, _Receiver.got
        kinds = []
        for headers, body in _Receiver.got:
            ours = verify_webhook(secret, body, headers)
            theirs = standardwebhooks.Webhook(secret).verify(body, headers)
            assert ours == theirs
            kinds.append((theirs["type"], theirs["data"]["event_id"]))
            wrong = "whsec_" + "d3Jvbmctc2VjcmV0LXdyb25nLXNlY3JldA=="
            with pytest.raises(standardwebhooks.WebhookVerificationError):
                standardwebhooks.Webhook(wrong).verify(body, headers)
            with pytest.raises(WebhookVerificationError):
                verify_webhook(wrong, body, headers)
            with pytest.raises(WebhookVerificationError):
                verify_webhook(secret, body + b" ", headers)
            with pytest.raises(WebhookVerificationError, match="tolerance"):
                verify_webhook(secret, body, headers, now=time.time() + 3600)
        assert sorted(kinds) == sorted([("memory.created", added["event_id"]), ("memory.deleted", added["event_id"])])
        created = next(json.loads(b) for _, b in _Receiver.got if json.loads(b)["type"] == "memory.created")
        assert created["data"]["memory_info"]["summary"] == "dana restores old clocks"
        delivered = client.list_webhook_deliveries(webhook_id=hook["webhook_id"], state="delivered")
        assert len(delivered) == 2 and all(d["attempts"] == 1 for d in delivered)
        assert client.redeliver_webhook(hook["webhook_id"]) == []
    finally:
        client.delete_webhook(hook["webhook_id"])
        httpd.shutdown()
    assert all(w["webhook_id"] != hook["webhook_id"] for w in client.list_webhooks())
