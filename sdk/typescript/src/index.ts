/**
 * mnemo-client: the TypeScript/JavaScript client for mnemo (Node >= 18, browsers, edge runtimes).
 * Only `fetch`; request bodies are typed from mnemo's OpenAPI document (`api.gen.ts`, generated
 * by `npm run gen` and checked current by the tests).
 */
import type { components, paths } from "./api.gen.js";

export type Schemas = components["schemas"];
/** An endpoint, as its path under `/api/memory/` (e.g. `"event/search"`). */
export type Endpoint = {
  [K in keyof paths]: K extends `/api/memory/${infer P}` ? (paths[K] extends { post: object } ? P : never) : never;
}[keyof paths];
/** What an endpoint answers in `data` (the envelope unwrapped), typed from mnemo's OpenAPI document. */
export type Answer<P extends Endpoint> =
  paths[`/api/memory/${P}`]["post"]["responses"][200]["content"]["application/json"]["data"];
/** A request body without the collection's names (the `Collection` fills them in). */
export type Body<K extends keyof Schemas> = Omit<Schemas[K], "collection_name" | "project_name" | "resource_id">;
/** An untyped answer (`request` with a path of your own). */
export type Data = Record<string, any>;

/** An error answer (or a failure to get one): mnemo's `code` (HTTP status × 100), the message
 * naming the field and the allowed range, the request id to look up in the server's log. */
export class MnemoError extends Error {
  readonly code: number;
  readonly requestId: string;
  readonly status: number;
  constructor(message: string, code: number, requestId = "", status = 0) {
    super(message);
    this.name = "MnemoError";
    this.code = code;
    this.requestId = requestId;
    this.status = status;
  }
}

export interface ClientOptions {
  /** e.g. `http://127.0.0.1:8600` (a bare `host:port` means http). */
  host?: string;
  /** A mnemo API key (sent as `Authorization: Bearer …`). */
  apiKey?: string;
  /** Per-attempt timeout (ms); default 30 000. */
  timeoutMs?: number;
  /** Retries on 429, 5xx and connection failures; default 3. */
  maxRetries?: number;
  /** First backoff (ms), doubled per retry with jitter; `Retry-After` wins; default 250. */
  backoffMs?: number;
  /** Another `fetch` (tests, proxies, polyfills). */
  fetch?: typeof fetch;
  /** Headers sent with every call. */
  headers?: Record<string, string>;
}

export interface CallOptions {
  signal?: AbortSignal;
  timeoutMs?: number;
  headers?: Record<string, string>;
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(t);
      reject(signal.reason);
    }, { once: true });
  });

function dropUndefined<T extends object>(o: T): T {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as T;
}

export class MemoryClient {
  readonly base: string;
  private readonly apiKey?: string;
  private readonly timeoutMs: number;
  private readonly maxRetries: number;
  private readonly backoffMs: number;
  private readonly fetchFn: typeof fetch;
  private readonly headers: Record<string, string>;

  constructor(options: ClientOptions = {}) {
    const host = options.host ?? "http://127.0.0.1:8600";
    this.base = (host.includes("://") ? host : `http://${host}`).replace(/\/+$/, "");
    this.apiKey = options.apiKey;
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.maxRetries = options.maxRetries ?? 3;
    this.backoffMs = options.backoffMs ?? 250;
    this.fetchFn = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.headers = options.headers ?? {};
  }

  /** POSTs `body` to `/api/memory/<path>` and answers the envelope's `data`, typed for a known
   *  endpoint. */
  request<P extends Endpoint>(path: P, body: object, opts?: CallOptions): Promise<Answer<P>>;
  request<T = Data>(path: string, body: object, opts?: CallOptions): Promise<T>;
  async request(path: string, body: object, opts: CallOptions = {}): Promise<unknown> {
    const { res, text } = await this.send(path, body, opts);
    const env = this.envelope(path, res, text);
    if (!res.ok || env.code !== 0) {
      throw new MnemoError(env.message ?? `HTTP ${res.status}`, env.code ?? res.status * 100, env.request_id ?? "", res.status);
    }
    return env.data;
  }

  /** POSTs to an endpoint that answers JSON lines (`user/export`) and answers the records. */
  async requestLines(path: string, body: object, opts: CallOptions = {}): Promise<Data[]> {
    const { res, text } = await this.send(path, body, opts);
    if (!res.ok) {
      const env = this.envelope(path, res, text);
      throw new MnemoError(env.message ?? `HTTP ${res.status}`, env.code ?? res.status * 100, env.request_id ?? "", res.status);
    }
    return text.split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l));
  }

  private envelope(path: string, res: Response, text: string): { code?: number; message?: string; request_id?: string; data?: unknown } {
    try {
      return JSON.parse(text);
    } catch {
      throw new MnemoError(`${path}: HTTP ${res.status} with a non-JSON body: ${text.slice(0, 200)}`, res.status * 100, "", res.status);
    }
  }

  /** One call with retries on 429, 5xx and connection failures (not after the caller aborts). */
  private async send(path: string, body: object, opts: CallOptions): Promise<{ res: Response; text: string }> {
    const url = `${this.base}/api/memory/${path.replace(/^\/+/, "")}`;
    const payload = JSON.stringify(dropUndefined(body));
    for (let attempt = 0; ; attempt++) {
      const timeout = AbortSignal.timeout(opts.timeoutMs ?? this.timeoutMs);
      const signal = opts.signal ? AbortSignal.any([opts.signal, timeout]) : timeout;
      let res: Response;
      let text: string;
      try {
        res = await this.fetchFn(url, {
          method: "POST",
          headers: {
            "content-type": "application/json",
            ...(this.apiKey ? { authorization: `Bearer ${this.apiKey}` } : {}),
            ...this.headers,
            ...opts.headers,
          },
          body: payload,
          signal,
        });
        text = await res.text();
      } catch (e) {
        if (opts.signal?.aborted) throw e; // the caller gave up: no retry
        if (attempt < this.maxRetries) {
          await sleep(this.delay(attempt), opts.signal);
          continue;
        }
        const why = timeout.aborted ? `timed out after ${opts.timeoutMs ?? this.timeoutMs} ms` : String(e);
        throw new MnemoError(`${path}: ${why}`, 0);
      }
      if ((res.status === 429 || res.status >= 500) && attempt < this.maxRetries) {
        const after = Number(res.headers.get("retry-after"));
        await sleep(Number.isFinite(after) && after > 0 ? after * 1000 : this.delay(attempt), opts.signal);
        continue;
      }
      return { res, text };
    }
  }

  private delay(attempt: number): number {
    const base = this.backoffMs * 2 ** attempt;
    return base / 2 + Math.random() * base / 2;
  }

  getCollection(collectionName: string, projectName = "default"): Collection {
    return new Collection(this, collectionName, projectName);
  }

  createCollection(body: Schemas["CollectionCreate"], opts?: CallOptions): Promise<Answer<"collection/create">> {
    return this.request("collection/create", body, opts);
  }

  async listCollections(projectName = "default", opts?: CallOptions): Promise<Answer<"collection/list">["collections"]> {
    return (await this.request("collection/list", { project_name: projectName }, opts)).collections;
  }

  deleteCollection(collectionName: string, projectName = "default", opts?: CallOptions): Promise<Answer<"collection/delete">> {
    return this.request("collection/delete", { collection_name: collectionName, project_name: projectName }, opts);
  }

  /** Registers a webhook endpoint (admin key); the answer's `secret` is shown only here.
   *  Deliveries are signed as Standard Webhooks (verify with the `standardwebhooks` package). */
  createWebhook(body: Schemas["WebhookCreateBody"], opts?: CallOptions): Promise<Answer<"webhook/create">> {
    return this.request("webhook/create", body, opts);
  }

  async listWebhooks(projectName = "default", opts?: CallOptions): Promise<Answer<"webhook/list">["webhooks"]> {
    return (await this.request("webhook/list", { project_name: projectName }, opts)).webhooks;
  }

  deleteWebhook(webhookId: string, projectName = "default", opts?: CallOptions): Promise<Answer<"webhook/delete">> {
    return this.request("webhook/delete", { webhook_id: webhookId, project_name: projectName }, opts);
  }

  /** Deliveries, newest first (`state`: pending, delivered or dead). */
  async listWebhookDeliveries(
    body: Schemas["WebhookDeliveriesBody"] = {},
    opts?: CallOptions,
  ): Promise<Answer<"webhook/deliveries">["deliveries"]> {
    return (await this.request("webhook/deliveries", body, opts)).deliveries;
  }

  /** Dead deliveries of an endpoint (all, or `delivery_ids`) back in the queue. */
  async redeliverWebhook(body: Schemas["WebhookRedeliverBody"], opts?: CallOptions): Promise<number[]> {
    return (await this.request("webhook/redeliver", body, opts)).redelivered;
  }

  /** `GET /healthz`: version, store, extractor, embedding model. */
  async healthz(): Promise<Data> {
    const res = await this.fetchFn(`${this.base}/healthz`);
    return res.json();
  }
}

/** The prompt-ready context `getContext` answers. */
export type Context = Answer<"get_context">;

/** One collection's calls; every method fills in the collection's names. */
export class Collection {
  constructor(
    readonly client: MemoryClient,
    readonly collectionName: string,
    readonly projectName = "default",
  ) {}

  private call<P extends Endpoint>(path: P, body: object, opts?: CallOptions): Promise<Answer<P>> {
    return this.client.request(path, { collection_name: this.collectionName, project_name: this.projectName, ...body }, opts);
  }

  info(opts?: CallOptions) { return this.call("collection/info", {}, opts); }

  /** Streams turns in; extraction runs in the background when the trigger fires. */
  streamingWrite(body: Body<"WriteBody">, opts?: CallOptions) { return this.call("session/streaming_write", body, opts); }
  /** A whole session at once (VikingDB's `session_id` re-used replaces that session). */
  sessionAdd(body: Body<"WriteBody">, opts?: CallOptions) { return this.call("session/add", body, opts); }
  flush(conversationId: string, opts?: CallOptions) { return this.call("session/flush", { conversation_id: conversationId }, opts); }
  sessionInfo(body: Body<"SessionInfoBody">, opts?: CallOptions) { return this.call("session/info", body, opts); }
  /** Deletes a conversation (messages, sessions, events) and withdraws its profile changes. */
  deleteConversation(conversationId: string, opts?: CallOptions) { return this.call("session/delete", { conversation_id: conversationId }, opts); }

  /** One prompt-ready string within `max_tokens`: profile, recent turns, this and other conversations' events. */
  getContext(body: Body<"GetContextBody">, opts?: CallOptions) { return this.call("get_context", body, opts); }
  searchEventMemory(body: Body<"EventSearchBody">, opts?: CallOptions) { return this.call("event/search", body, opts); }
  searchProfileMemory(body: Body<"ProfileSearchBody">, opts?: CallOptions) { return this.call("profile/search", body, opts); }
  /** The people, places, organisations and pets a user's memories name, most events first. */
  listEntities(body: Body<"EntityListBody">, opts?: CallOptions) { return this.call("entity/list", body, opts); }
  /** One of a user's entities (its entity_id, name or an alias) and its events, newest first. */
  getEntity(body: Body<"EntityGetBody">, opts?: CallOptions) { return this.call("entity/get", body, opts); }
  /** The collection's users (`contains`: part of the id), most recently active first. */
  listUsers(body: Body<"UserListBody">, opts?: CallOptions) { return this.call("user/list", body, opts); }
  /** Profiles and events of a user at once (VikingDB's SearchMemory). */
  searchMemory(body: Body<"MemorySearchBody">, opts?: CallOptions) { return this.call("search", body, opts); }

  addEvent(body: Body<"EventAddBody">, opts?: CallOptions) { return this.call("event/add", body, opts); }
  /** 1 to 500 events at once: all stored in one transaction, or none if any is invalid. */
  addEvents(body: Body<"EventBatchAddBody">, opts?: CallOptions) { return this.call("event/batch_add", body, opts); }
  updateEvent(body: Body<"EventUpdateBody">, opts?: CallOptions) { return this.call("event/update", body, opts); }
  deleteEvent(eventId: string, opts?: CallOptions) { return this.call("event/delete", { event_id: eventId }, opts); }
  batchDeleteEvent(body: Body<"BatchDeleteBody">, opts?: CallOptions) { return this.call("event/batch_delete", body, opts); }

  addProfile(body: Body<"ProfileAddBody">, opts?: CallOptions) { return this.call("profile/add", body, opts); }
  updateProfile(body: Body<"ProfileUpdateBody">, opts?: CallOptions) { return this.call("profile/update", body, opts); }
  deleteProfile(profileId: string, opts?: CallOptions) { return this.call("profile/delete", { profile_id: profileId }, opts); }
  batchDeleteProfile(body: Body<"ProfileBatchDeleteBody">, opts?: CallOptions) { return this.call("profile/batch_delete", body, opts); }
  triggerUpdateProfile(body: Body<"ProfileTriggerBody">, opts?: CallOptions) { return this.call("profile/trigger_update", body, opts); }

  listJobs(body: Body<"JobListBody"> = {}, opts?: CallOptions) { return this.call("job/list", body, opts); }
  retryJobs(body: Body<"JobRetryBody"> = {}, opts?: CallOptions) { return this.call("job/retry", body, opts); }
  stats(body: Body<"StatsBody"> = {}, opts?: CallOptions) { return this.call("stats", body, opts); }

  /** Everything stored about a user, as records (the server answers JSON lines). */
  exportUser(userId: string, opts?: CallOptions): Promise<Data[]> {
    const body = { collection_name: this.collectionName, project_name: this.projectName, user_id: userId };
    return this.client.requestLines("user/export", body, opts);
  }

  forgetUser(userId: string, dryRun?: boolean, opts?: CallOptions) {
    return this.call("user/forget", { user_id: userId, dry_run: dryRun }, opts);
  }
}
