// A small program written against the package as a user would, type-checked by `tsc --noEmit`
// in `npm test` (strict): the calls, their bodies and their answers are typed from mnemo's
// OpenAPI document.
import { MemoryClient, MnemoError, type Answer, type Body, type Context } from "mnemo-client";

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
    const found: Answer<"event/search"> = await col.searchEventMemory({ query: "Porto", filter: { user_id: ["u"] } });
    const first: string | undefined = found.result_list[0]?.event_id;
    const relevance: number | undefined = found.result_list[0]?.origin_score;
    const fullTextOnly: boolean = found.semantic === false;
    // @ts-expect-error: answers are typed, not `any` — a field the document does not name is an error.
    void found.no_such_field;
    const jobs = await col.listJobs({ limit: 5 });
    const states: Array<"queued" | "running" | "done" | "failed"> = jobs.jobs.map((j) => j.state);
    return `${ctx.context_str} (${ctx.token_count} tokens; first ${first} at ${relevance}; ${fullTextOnly}; ${states})`;
  } catch (e) {
    if (e instanceof MnemoError) return `error ${e.code}: ${e.message}`;
    throw e;
  }
}
