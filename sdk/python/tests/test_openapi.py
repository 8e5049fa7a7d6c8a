"""docs/openapi.json is a valid OpenAPI 3 document, and the SDK covers every endpoint it lists."""

import json
import pathlib

from openapi_spec_validator import validate

from mnemo_client.client import Collection, MemoryClient

DOC = pathlib.Path(__file__).resolve().parents[3] / "docs" / "openapi.json"


def test_the_committed_document_is_valid_openapi():
    validate(json.loads(DOC.read_text()))


def test_the_sdk_has_a_method_for_every_endpoint():
    paths = json.loads(DOC.read_text())["paths"]
    by_path = {
        "collection/create": MemoryClient.create_collection, "collection/list": MemoryClient.list_collections,
        "collection/delete": MemoryClient.delete_collection, "session/streaming_write": Collection.streaming_write,
        "session/add": Collection.session_add, "session/flush": Collection.flush, "session/info": Collection.session_info,
        "session/delete": Collection.delete_conversation,
        "event/search": Collection.search_event_memory, "event/add": Collection.add_event,
        "event/batch_add": Collection.add_events,
        "event/update": Collection.update_event, "event/delete": Collection.delete_event,
        "event/batch_delete": Collection.batch_delete_event, "profile/search": Collection.search_profile_memory,
        "profile/add": Collection.add_profile, "profile/update": Collection.update_profile,
        "profile/delete": Collection.delete_profile, "profile/batch_delete": Collection.batch_delete_profile,
        "profile/trigger_update": Collection.trigger_update_profile, "search": Collection.search_memory, "job/list": Collection.list_jobs, "job/retry": Collection.retry_jobs, "get_context": Collection.get_context,
        "entity/list": Collection.list_entities, "entity/get": Collection.get_entity, "user/list": Collection.list_users,
        "stats": Collection.stats, "collection/info": Collection.info, "user/export": Collection.export_user, "user/forget": Collection.forget_user,
        "webhook/create": MemoryClient.create_webhook, "webhook/list": MemoryClient.list_webhooks,
        "webhook/delete": MemoryClient.delete_webhook, "webhook/deliveries": MemoryClient.list_webhook_deliveries,
        "webhook/redeliver": MemoryClient.redeliver_webhook,
    }
    # Operator-only endpoints are reached with MemoryClient.request(path, body).
    operator = {"maintenance/run", "maintenance/list", "admin/clock"}
    # GET /api/memory/ping is VikingDB's credential check (MemoryClient.healthz is ours).
    api = {p[len("/api/memory/"):] for p in paths if p.startswith("/api/memory/") and p != "/api/memory/ping"}
    assert api - operator == set(by_path), api ^ set(by_path)
