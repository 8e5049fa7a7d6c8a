// The package loads from CommonJS too (`require("mnemo-client")`, resolved through its exports
// map as an application's require would), with the same classes as the ES module.
const { test } = require("node:test");
const assert = require("node:assert/strict");

test("require() gets the CommonJS build with the same API", async () => {
  const cjs = require("mnemo-client");
  assert.equal(require.resolve("mnemo-client").endsWith("/dist/cjs/index.js"), true, require.resolve("mnemo-client"));
  assert.equal(typeof cjs.MemoryClient, "function");
  const esm = await import("mnemo-client");
  assert.deepEqual(Object.keys(cjs).sort(), Object.keys(esm).filter((k) => k !== "default").sort());
  const client = new cjs.MemoryClient({ host: "http://127.0.0.1:9", maxRetries: 0, timeoutMs: 500 });
  await assert.rejects(client.getCollection("c").stats({}), (e) => e instanceof cjs.MnemoError);
});
