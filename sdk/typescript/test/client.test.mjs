// mnemo-client against the real `mnemo` binary ($MNEMO_BIN, else <repo>/target/debug/mnemo),
// with Node's own test runner. Run: `npm test` (builds first).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, writeFileSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { createInterface } from "node:readline";
import { MemoryClient, MnemoError } from "../dist/index.js";

const here = dirname(fileURLToPath(import.meta.url));
const repo = join(here, "..", "..", "..");
const KEY = "ts-test-key-0123456789";
let server, dir, client;

/** The store the server uses: the embedded default, or a PostgreSQL schema of its own. */
function storeEnv(tag) {
  if (process.env.MNEMO_TEST_STORE !== "postgres") return {};
  return {
    MNEMO_STORE__ENGINE: "postgres",
    MNEMO_STORE__URL: process.env.MNEMO_TEST_DATABASE_URL,
    MNEMO_STORE__SCHEMA: `ts_${tag}`,
    MNEMO_STORE__POOL: "4",
  };
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "mnemo-ts-"));
  const cfg = join(dir, "mnemo.yaml");
  writeFileSync(cfg, `server:\n  api_keys:\n    - key_env: MNEMO_TS_KEY\n      projects: [default]\nsession:\n  poll_interval_ms: 50\n`);
  const bin = process.env.MNEMO_BIN ?? join(repo, "target", "debug", "mnemo");
  server = spawn(bin, ["serve", "--config", cfg, "--bind", "127.0.0.1:0", "--data", join(dir, "data")], {
    env: { ...process.env, MNEMO_TS_KEY: KEY, MNEMO_LOG: "warn", ...storeEnv(String(process.pid)) },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const line = await new Promise((resolve, reject) => {
    createInterface({ input: server.stdout }).once("line", resolve);
    server.once("exit", (code) => reject(new Error(`mnemo exited with ${code}`)));
  });
  const url = line.replace("mnemo listening on ", "").split(" ")[0];
  client = new MemoryClient({ host: url, apiKey: KEY, maxRetries: 2, backoffMs: 50 });
});

after(() => {
  server?.kill("SIGTERM");
  rmSync(dir, { recursive: true, force: true });
});

async function eventually(what, f, secs = 20) {
  const end = Date.now() + secs * 1000;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

test("stream turns, extract, and get a prompt-ready context", async () => {
  const col = client.getCollection("ts_demo");
  const w = await col.streamingWrite({
    conversation_id: "conv1",
    messages: [
      { role: "user", content: "I live in Lisbon and I am allergic to peanuts" },
      { role: "assistant", content: "Noted, no peanuts." },
    ],
    extract_trigger: { message_count: 2 },
    metadata: { user_id: "u1" },
  });
  assert.equal(w.accepted, 2);
  assert.equal(w.extraction.triggered, true);
  await eventually("extraction", async () => (await col.listJobs({})).jobs?.every?.((j) => j.state === "done") ?? false);
  const hits = await col.searchEventMemory({ query: "peanut allergy", filter: { user_id: "u1" }, limit: 3 });
  assert.ok(hits.result_list[0].memory_info.summary.includes("peanut"));
  await col.streamingWrite({ conversation_id: "conv2", messages: [{ role: "user", content: "What should I cook tonight?" }], metadata: { user_id: "u1" } });
  const ctx = await col.getContext({ conversation_id: "conv2", query: "dinner ideas without allergens", max_tokens: 400 });
  assert.ok(ctx.context_str.includes("peanut"), ctx.context_str);
  assert.ok(ctx.token_count <= 400);
});

test("events and profiles: CRUD, search, export and forget", async () => {
  const col = client.getCollection("ts_crud");
  const e = await col.addEvent({ event_type: "event_v1", user_id: "u2", memory_info: { summary: "Bought a red bike" } });
  await col.updateEvent({ event_id: e.event_id, memory_info: { summary: "Bought a blue bike" } });
  const found = await col.searchEventMemory({ query: "bike", filter: { user_id: "u2" } });
  assert.equal(found.result_list[0].memory_info.summary, "Bought a blue bike");
  const batch = await client.getCollection("ts_batch").addEvents({ events: [
    { event_type: "event_v1", user_id: "u2", memory_info: { summary: "Joined a cycling club" } },
    { event_type: "event_v1", user_id: "u2", memory_info: { summary: "Rode 80 km on Sunday" } },
  ] });
  assert.equal(batch.event_ids.length, 2);
  const p = await col.addProfile({ user_id: "u2", memory_info: { city: "Oslo" } });
  await col.updateProfile({ profile_id: p.profile_id, memory_info: { pet: "cat" } });
  const profiles = await col.searchProfileMemory({ filter: { user_id: "u2" } });
  assert.deepEqual(profiles.result_list[0].memory_info, { city: "Oslo", pet: "cat" });
  const both = await col.searchMemory({ query: "bike", filter: { user_id: "u2" } });
  assert.deepEqual(both.result_list.map((i) => i.memory_category), ["profile", "event"]);
  const records = await col.exportUser("u2");
  assert.ok(records.some((r) => r.kind === "event") && records.some((r) => r.kind === "profile"));
  const gone = await col.forgetUser("u2");
  assert.ok(gone.deleted.events >= 1 && gone.deleted.profiles === 1, JSON.stringify(gone));
  assert.deepEqual((await col.searchEventMemory({ filter: { user_id: "u2" } })).result_list, []);
  await col.deleteEvent(e.event_id).then(() => assert.fail("already forgotten"), (err) => assert.equal(err.status, 404));
});

test("errors carry code, message, request id and status", async () => {
  const col = client.getCollection("ts_err");
  await assert.rejects(col.searchEventMemory({ query: "x", filter: { user_id: "u" }, limit: 0 }), (err) => {
    assert.ok(err instanceof MnemoError);
    assert.equal(err.code, 40000);
    assert.equal(err.status, 400);
    assert.match(err.message, /^limit: must be an integer in 1..=5000, got 0/);
    assert.ok(err.requestId.length > 0);
    return true;
  });
  // A misspelled field is refused, never dropped (the types would not let it through; plain JS can).
  await assert.rejects(client.request("event/search", { collection_name: "ts_err", limt: 1 }), /limt: unknown field/);
  const stranger = new MemoryClient({ host: client.base, apiKey: "wrong-key-0123456789", maxRetries: 0 });
  await assert.rejects(stranger.getCollection("ts_err").info(), (err) => err.status === 401 && err.code === 40100);
});

test("an AbortSignal stops a call and a timeout fails it", async () => {
  const ac = new AbortController();
  ac.abort(new Error("the user left"));
  await assert.rejects(client.getCollection("ts_demo").info({ signal: ac.signal }), /the user left/);
  const hang = new MemoryClient({
    host: "http://127.0.0.1:9",
    maxRetries: 0,
    fetch: (_url, init) => new Promise((_, reject) => init.signal.addEventListener("abort", () => reject(init.signal.reason))),
  });
  await assert.rejects(hang.getCollection("c").info({ timeoutMs: 50 }), (err) => err instanceof MnemoError && /timed out after 50 ms/.test(err.message));
});

test("429, 5xx and connection failures are retried with backoff, Retry-After honoured", async () => {
  // A scripted fetch in front of the real server: fails twice, then passes the call through.
  let calls = 0;
  const flaky = new MemoryClient({
    host: client.base,
    apiKey: KEY,
    maxRetries: 3,
    backoffMs: 10,
    fetch: async (url, init) => {
      calls++;
      if (calls === 1) throw new TypeError("fetch failed: ECONNRESET");
      if (calls === 2) return new Response(JSON.stringify({ code: 42900, message: "busy" }), { status: 429, headers: { "retry-after": "0" } });
      return fetch(url, init);
    },
  });
  assert.equal((await flaky.getCollection("ts_demo").info()).collection_name, "ts_demo");
  assert.equal(calls, 3);
  const down = new MemoryClient({ host: client.base, maxRetries: 1, backoffMs: 1, fetch: async () => new Response("{}", { status: 503 }) });
  await assert.rejects(down.getCollection("c").info(), (err) => err.status === 503);
});

test("the client has a method for every endpoint, and api.gen.ts is current", () => {
  const doc = JSON.parse(readFileSync(join(repo, "docs", "openapi.json"), "utf8"));
  const api = Object.keys(doc.paths).filter((p) => p.startsWith("/api/memory/")).map((p) => p.slice(12));
  const byPath = {
    "collection/create": "createCollection", "collection/list": "listCollections", "collection/delete": "deleteCollection",
    "collection/info": "info", "session/streaming_write": "streamingWrite", "session/add": "sessionAdd",
    "session/flush": "flush", "session/info": "sessionInfo", "session/delete": "deleteConversation", "get_context": "getContext", "event/search": "searchEventMemory",
    "profile/search": "searchProfileMemory", "entity/list": "listEntities", "entity/get": "getEntity", "user/list": "listUsers", "search": "searchMemory", "event/add": "addEvent", "event/batch_add": "addEvents", "event/update": "updateEvent",
    "event/delete": "deleteEvent", "event/batch_delete": "batchDeleteEvent", "profile/add": "addProfile",
    "profile/update": "updateProfile", "profile/delete": "deleteProfile", "profile/batch_delete": "batchDeleteProfile",
    "profile/trigger_update": "triggerUpdateProfile", "job/list": "listJobs", "job/retry": "retryJobs", "stats": "stats",
    "user/export": "exportUser", "user/forget": "forgetUser",
    "webhook/create": "createWebhook", "webhook/list": "listWebhooks", "webhook/delete": "deleteWebhook",
    "webhook/deliveries": "listWebhookDeliveries", "webhook/redeliver": "redeliverWebhook",
  };
  // Operator endpoints go through client.request(path, body); ping is VikingDB's credential check.
  const operator = new Set(["maintenance/run", "maintenance/list", "admin/clock", "ping"]);
  assert.deepEqual(api.filter((p) => !operator.has(p)).sort(), Object.keys(byPath).sort());
  const col = client.getCollection("x");
  for (const [path, method] of Object.entries(byPath)) {
    assert.equal(typeof (col[method] ?? client[method]), "function", `${path} → ${method}`);
  }
  const out = join(dir, "api.gen.ts");
  execFileSync(join(here, "..", "node_modules", ".bin", "openapi-typescript"),
    [join(repo, "docs", "openapi.json"), "--default-non-nullable", "false", "-o", out], { stdio: "ignore" });
  assert.equal(readFileSync(out, "utf8"), readFileSync(join(here, "..", "src", "api.gen.ts"), "utf8"),
    "src/api.gen.ts is stale: run `npm run gen`");
});

test("the README's example runs against the server", () => {
  // `mnemo-client` resolves to this package itself (package.json "exports" + self-reference).
  const out = execFileSync(process.execPath, [join(here, "..", "examples", "quickstart.mjs")], {
    env: { ...process.env, MNEMO_URL: client.base, MNEMO_KEY: KEY },
    encoding: "utf8",
  });
  assert.match(out, /vegetarian/);
  assert.match(out, /User: Any dinner ideas near me\?/);
});

test("webhook deliveries verify with the standardwebhooks package, and a wrong secret does not", async () => {
  const { createServer } = await import("node:http");
  const { Webhook } = await import("standardwebhooks");
  const got = [];
  const receiver = createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => { got.push({ headers: req.headers, body }); res.writeHead(204).end(); });
  });
  await new Promise((r) => receiver.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${receiver.address().port}/hook`;
  const hook = await client.createWebhook({ url, events: ["memory.created"] });
  try {
    const col = client.getCollection("ts_webhooks");
    const added = await col.addEvent({ event_type: "event_v1", user_id: "erin", memory_info: { summary: "erin builds kites" } });
    for (let i = 0; i < 400 && got.length < 1; i++) await new Promise((r) => setTimeout(r, 50));
    assert.equal(got.length, 1);
    const msg = new Webhook(hook.secret).verify(got[0].body, got[0].headers);
    assert.equal(msg.type, "memory.created");
    assert.equal(msg.data.event_id, added.event_id);
    assert.equal(msg.data.memory_info.summary, "erin builds kites");
    assert.throws(() => new Webhook("whsec_" + Buffer.from("a-wrong-secret-of-some-length").toString("base64")).verify(got[0].body, got[0].headers));
    assert.throws(() => new Webhook(hook.secret).verify(got[0].body + " ", got[0].headers));
    const delivered = await client.listWebhookDeliveries({ webhook_id: hook.webhook_id, state: "delivered" });
    assert.equal(delivered.length, 1);
  } finally {
    await client.deleteWebhook(hook.webhook_id);
    receiver.close();
  }
});
