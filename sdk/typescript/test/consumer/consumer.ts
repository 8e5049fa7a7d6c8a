// A small program written against the package as a user would, type-checked by `tsc --noEmit`
// in `npm test` (strict): the calls and their bodies are typed from mnemo's OpenAPI document.
import { MemoryClient, MnemoError, type Body, type Context } from "mnemo-client";

export async function rememberAndRecall(host: string, apiKey: string): Promise<string> {
  const client = new MemoryClient({ host, apiKey, timeoutMs: 5_000 });
  const col = client.getCollection("typed");
  const trigger: Body<"WriteBody">["extract_trigger"] = { message_count: 2 };
  await col.streamingWrite({
    conversation_id: "c1",
    messages: [{ role: "user", content: "I live in Porto" }],
    extract_trigger: trigger,
    metadata: { user_id: "u" },
  });
  try {
    const ctx: Context = await col.getContext({ conversation_id: "c1", query: "where do I live?", max_tokens: 400 });
    return `${ctx.context_str} (${ctx.token_count} tokens)`;
  } catch (e) {
    if (e instanceof MnemoError) return `error ${e.code}: ${e.message}`;
    throw e;
  }
}
