// Browser test of the dashboard: starts the real `mnemo serve` on port 0 with a temporary data
// directory, seeds memories over HTTP, then drives the page in headless Chromium (Debian's
// `chromium`) with playwright-core: it opens on the collection's users and extraction queue, a
// user's page shows the profile with its history, the entities and a timeline that the as-of
// slider takes back in time; search, delete a memory (confirming the dialog), and take a screenshot. Prints the screenshot's path and a closing "N passed, N failed" line.
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
  // A second user whose memory has a past: dated events and a profile value that changed.
  const other = "time-user";
  await api(base, "event/add", { collection_name: "dash", event_type: "event_v1", user_id: other, time: Date.UTC(2024, 0, 10),
    memory_info: { summary: "Moved to Porto for a job at Farfetch" } });
  await api(base, "event/add", { collection_name: "dash", event_type: "event_v1", user_id: other, time: Date.UTC(2025, 5, 1),
    memory_info: { summary: "Adopted a cat named Miso with my sister Ines" } });
  const added = await api(base, "profile/add", { collection_name: "dash", user_id: other, attributes: { city: "Lisbon" } });
  await api(base, "profile/update", { collection_name: "dash", profile_id: added.profile_id, attributes: { city: "Porto" } });

  browser = await chromium.launch({ executablePath: browserPath, args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"] });
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on("dialog", (d) => d.accept());
  await page.goto(base + "/");
  await page.waitForSelector("#collection option[value='dash'], #collection option:text('dash')", { state: "attached" });
  // It opens on the collection: its users, most recently active first, and the queue.
  await waitFor(async () => (await page.locator("#users-table tbody tr").count()) === 2, "the collection's two users");
  await waitFor(async () => /\d+ queued · \d+ running · \d+ failed/.test(await page.locator("#queue").innerText()), "the extraction queue");
  await page.fill("#user-search", "TIME");
  await waitFor(async () => (await page.locator("#users-table tbody tr").count()) === 1, "the user search");
  await page.locator("#users-table tbody tr", { hasText: other }).click();
  await waitFor(async () => (await page.locator("#profile").innerText()).includes("Porto"), "the picked user's profile");
  const profileText = await page.locator("#profile").innerText();
  if (!/Before[\s\S]*Lisbon/.test(profileText)) throw new Error("the profile should show the replaced value, got: " + profileText);
  await waitFor(async () => (await page.locator("#entities").innerText()).includes("Ines"), "the user's entities");
  await waitFor(async () => { const t = await page.locator("#timeline").innerText(); return t.includes("Porto") && t.includes("Miso"); }, "the timeline");
  // As of mid-2024: the cat came later, and the profile's city was still Lisbon.
  await page.$eval("#asof", (el, day) => { el.value = String(day); el.dispatchEvent(new Event("input")); el.dispatchEvent(new Event("change")); },
    Math.floor(Date.UTC(2024, 5, 1) / 86400000));
  await waitFor(async () => (await page.locator("#asof-label").innerText()) === "2024-06-01", "the slider's date");
  await waitFor(async () => { const t = await page.locator("#timeline").innerText(); return t.includes("Porto") && !t.includes("Miso"); }, "the timeline as of then");
  await waitFor(async () => { const p = await page.locator("#profile").innerText(); return p.includes("Lisbon") && !p.includes("Porto"); }, "the profile as of then");
  await page.fill("#user-search", "");
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
  console.log("dashboard: opened on users and queue, a user's profile, entities and timeline as of a day; searched, deleted a memory; screenshot at " + shot);
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
