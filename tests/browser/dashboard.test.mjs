// Browser test of the dashboard: starts the real `mnemo serve` on port 0 with a temporary data
// directory, seeds memories over HTTP, then drives the page in headless Chromium (Debian's
// `chromium`) with playwright-core: load, search, delete a memory (confirming the dialog), and
// take a screenshot. Prints the screenshot's path and a closing "N passed, N failed" line.
import { chromium } from "playwright-core";
import { spawn } from "node:child_process";
import { mkdtempSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";

const root = resolve(import.meta.dirname, "../..");
const bin = process.env.MNEMO_BIN || join(root, "target/debug/mnemo");
const browserPath = process.env.CHROMIUM || "/usr/bin/chromium";
const shot = process.env.MNEMO_SCREENSHOT || join(root, "target/dashboard.png");

function startServer() {
  const dir = mkdtempSync(join(tmpdir(), "mnemo-dash-"));
  const child = spawn(bin, ["serve", "--bind", "127.0.0.1:0", "--data", join(dir, "data")], { stdio: ["ignore", "pipe", "inherit"], env: { ...process.env, MNEMO_LOG: "warn" } });
  return new Promise((ok, fail) => {
    createInterface({ input: child.stdout }).once("line", (line) => {
      const m = line.match(/listening on (http:\/\/\S+)/);
      m ? ok({ child, base: m[1] }) : fail(new Error("server did not start: " + line));
    });
    child.once("exit", (code) => fail(new Error("server exited " + code)));
  });
}

async function api(base, path, body) {
  const r = await fetch(`${base}/api/memory/${path}`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  const v = await r.json();
  if (v.code !== 0) throw new Error(`${path}: ${v.message}`);
  return v.data;
}

async function waitFor(cond, what, ms = 10000) {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (await cond()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("timed out waiting for " + what);
}

let passed = 0, failed = 0, server, browser;
try {
  for (const p of [bin, browserPath]) if (!existsSync(p)) throw new Error(`missing ${p} (build with cargo; apt-get install chromium)`);
  server = await startServer();
  const { base } = server;
  const user = "dash-user";
  await api(base, "event/add", { collection_name: "dash", event_type: "event_v1", user_id: user, memory_info: { summary: "User loves pour-over coffee from Ethiopia" } });
  await api(base, "event/add", { collection_name: "dash", event_type: "event_v1", user_id: user, memory_info: { summary: "用户周末喜欢去爬山" } });
  await api(base, "session/streaming_write", { collection_name: "dash", conversation_id: "dash-conv", metadata: { user_id: user },
    messages: [{ role: "user", content: "I live in Lisbon" }] });

  browser = await chromium.launch({ executablePath: browserPath, args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"] });
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on("dialog", (d) => d.accept());
  await page.goto(base + "/");
  await page.waitForSelector("#collection option[value='dash'], #collection option:text('dash')", { state: "attached" });
  await page.selectOption("#collection", "dash");
  await page.fill("#user", user);
  await page.click("#load-btn");
  await waitFor(async () => (await page.locator("#status").innerText()).includes("newest first"), "the user's memories to load");
  await page.fill("#query", "coffee");
  await page.click("#search-btn");
  // Wait for this search's own answer (the load above also showed two rows, newest first).
  await waitFor(async () => (await page.locator("#status").innerText()).includes("for “coffee”"), "the search to answer");
  await waitFor(async () => (await page.locator("#events-table tbody tr").count()) === 2, "two search results");
  const first = await page.locator("#events-table tbody tr").first().innerText();
  if (!first.includes("coffee")) throw new Error("the coffee memory should rank first, got: " + first);
  await page.fill("#conversation", "dash-conv");
  await page.click("#conv-btn");
  await waitFor(async () => (await page.locator("#short-term").innerText()).includes("Lisbon"), "short-term memory");
  await page.locator(".delete-event").first().click();
  await waitFor(async () => (await page.locator("#status").innerText()).includes("for “coffee”") &&
    (await page.locator("#events-table tbody tr").count()) === 1, "the deleted row to disappear");
  const left = await api(base, "event/search", { collection_name: "dash", filter: { user_id: user } });
  if (left.count !== 1 || left.result_list[0].memory_info.summary.includes("coffee")) throw new Error("the delete did not reach the store");
  await page.screenshot({ path: shot, fullPage: true });
  console.log("dashboard: searched, deleted a memory; screenshot at " + shot);
  passed++;
} catch (e) {
  console.error("dashboard test failed:", e);
  failed++;
} finally {
  await browser?.close();
  server?.child.kill("SIGKILL");
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
