//! The OpenAPI 3 document, generated from the route table (`routes::endpoints`), the request
//! DTOs' JSON schemas (`schemars`, field docs become descriptions) and what each route answers
//! (`answers`). Served at `/openapi.json` and
//! committed at `docs/openapi.json` (a test keeps the two equal; `mnemo openapi` regenerates it).

use serde_json::{Map, Value, json};

pub fn document() -> Value {
    let mut generator = schemars::generate::SchemaSettings::openapi3().into_generator();
    let mut paths = Map::new();
    for e in crate::routes::endpoints() {
        let body = serde_json::to_value((e.body)(&mut generator)).expect("schema serializes");
        let op = json!({
            "post": {
                "summary": e.summary,
                "operationId": e.path.trim_start_matches('/').replace('/', "_"),
                "tags": [e.path.trim_start_matches('/').split('/').next().unwrap_or("memory")],
                "requestBody": {"required": true, "content": {"application/json": {"schema": body}}},
                "responses": {
                    "200": {"description": "Success: `code` 0 and the result in `data`.",
                            "content": {"application/json": {"schema": {"allOf": [
                                {"$ref": "#/components/schemas/Envelope"},
                                {"type": "object", "required": ["data"], "properties": {"data": crate::answers::answer(e.path)}},
                            ]}}}},
                    "400": {"$ref": "#/components/responses/Error"},
                    "401": {"$ref": "#/components/responses/Error"},
                    "403": {"$ref": "#/components/responses/Error"},
                    "404": {"$ref": "#/components/responses/Error"},
                    "413": {"$ref": "#/components/responses/Error"},
                    "429": {"$ref": "#/components/responses/Error"},
                    "503": {"$ref": "#/components/responses/Error"},
                },
            }
        });
        paths.insert(format!("/api/memory{}", e.path), op);
    }
    paths.insert(
        "/api/memory/ping".into(),
        json!({"get": {"summary": "Checks the credentials (a key, or a VikingDB IAM signature) and that the server answers: VikingDB's Ping.",
            "operationId": "ping", "tags": ["ping"],
            "responses": {"200": {"description": "The credentials are good.",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Envelope"}}}},
                "401": {"$ref": "#/components/responses/Error"}}}}),
    );
    paths.insert(
        "/healthz".into(),
        json!({"get": {"summary": "Liveness, version, store engine, extractor and embedding model.", "operationId": "healthz",
            "security": [], "responses": {"200": {"description": "The server is up."}}}}),
    );
    paths.insert(
        "/metrics".into(),
        json!({"get": {"summary": "Prometheus metrics (needs a key when keys are configured).", "operationId": "metrics",
            "responses": {"200": {"description": "Prometheus text exposition format."}}}}),
    );
    paths.insert(
        "/mcp".into(),
        json!({"post": {"summary": "The MCP server (streamable HTTP, JSON-RPC): tools remember, recall, search_memory, add_memory, forget_memory; scoped by X-Mnemo-Project / X-Mnemo-Collection / X-Mnemo-User.",
            "operationId": "mcp", "responses": {"200": {"description": "A JSON-RPC response."}}}}),
    );
    let mut schemas: Map<String, Value> = generator.take_definitions(true).into_iter().collect();
    // What answers are made of (`answers`): after the request bodies' own fix-ups below.
    let records = crate::answers::components();
    // Every body naming a collection may name it by `resource_id` instead (see `json.rs`).
    for schema in schemas.values_mut() {
        let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) else { continue };
        if !props.contains_key("collection_name") {
            continue;
        }
        props.insert(
            "resource_id".into(),
            json!({"type": "string", "description": "VikingDB's other name for a collection: `<project_name>/<collection_name>` (collection/info answers it); instead of collection_name and project_name."}),
        );
        if let Some(req) = schema.get_mut("required").and_then(Value::as_array_mut) {
            req.retain(|f| f != "collection_name");
            if req.is_empty() {
                // OpenAPI 3.0: a `required` list holds at least one name.
                schema.as_object_mut().expect("a schema object").remove("required");
            }
        }
    }
    schemas.extend(records);
    schemas.insert(
        "Envelope".into(),
        json!({"type": "object", "required": ["code", "message", "request_id"], "properties": {
            "code": {"type": "integer", "description": "0 on success; otherwise the HTTP status × 100."},
            "message": {"type": "string", "description": "\"success\", or what is wrong: the field's JSON path and the allowed range."},
            "request_id": {"type": "string", "description": "Identifies the request in the server's log (also the x-request-id header)."},
            "data": {"description": "The result (null on errors)."},
            "ResponseMetadata": {"type": "object", "description": "Errors only: Volcengine's envelope with the VikingDB memory API's error code (`Error.Code`, e.g. 1000003 invalid request), which the VikingDB SDKs map to their exception classes.",
                "properties": {"RequestId": {"type": "string"}, "Error": {"type": "object", "properties": {"Code": {"type": "integer"}, "Message": {"type": "string"}}}}}
        }}),
    );
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "mnemo",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "A memory service for LLM applications: stream conversation turns in, get a prompt-ready context back. Every endpoint takes POST with a JSON body and answers the envelope {code, message, request_id, data}.",
        },
        "servers": [{"url": "http://127.0.0.1:8600"}],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                "description": "Required unless the server runs on loopback without keys; each key is allowed a list of projects."}},
            "responses": {"Error": {"description": "An error: `code` = HTTP status × 100, `message` names the field and the allowed range.",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Envelope"}}}}},
            "schemas": schemas,
        },
    })
}
