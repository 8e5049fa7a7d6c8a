// The README's example: memory before the model call, the turn written after it.
// Run against a server: MNEMO_URL=http://127.0.0.1:8600 [MNEMO_KEY=…] node examples/quickstart.mjs
import { MemoryClient } from "mnemo-client";

const client = new MemoryClient({ host: process.env.MNEMO_URL ?? "http://127.0.0.1:8600", apiKey: process.env.MNEMO_KEY });
const memory = client.getCollection("quickstart");

// Turns stream in as they happen; extraction runs in the background once the trigger fires.
await memory.streamingWrite({
  conversation_id: "chat-1",
  messages: [
    { role: "user", content: "I'm vegetarian and I live in Porto." },
    { role: "assistant", content: "Got it: vegetarian, Porto." },
  ],
  extract_trigger: { message_count: 2 },
  metadata: { user_id: "ana" },
});

// Next conversation: one call before the model gives a prompt-ready string within a budget.
const question = "Any dinner ideas near me?";
let ctx;
for (let i = 0; i < 100; i++) {
  ctx = await memory.getContext({ conversation_id: "chat-2", query: question, max_tokens: 600, event_search_config: { filter: { user_id: "ana" } }, profile_search_config: { filter: { user_id: "ana" } } });
  if (ctx.context_str.includes("vegetarian")) break;
  await new Promise((r) => setTimeout(r, 100)); // the first extraction takes a moment
}
const prompt = `${ctx.context_str}\n\nUser: ${question}`;
console.log(prompt);

// … call your model with `prompt`, then write the turn back:
await memory.streamingWrite({
  conversation_id: "chat-2",
  messages: [{ role: "user", content: question }, { role: "assistant", content: "Try the vegetarian tasca on Rua das Flores." }],
  metadata: { user_id: "ana" },
});
