// A thin typed client for the infercache sidecar over gRPC (Connect's gRPC transport
// for Node, HTTP/2). The messages and service descriptors are generated from
// protos/ into src/gen (never edited); this file only adds key building, defaults
// and the streaming helpers, mirroring the Python client (clients/python).


import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { type Client, createClient, type Transport } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";

import { Health, HealthCheckResponse_ServingStatus } from "./gen/grpc/health/v1/health_pb.js";
import {
  AdminService,
  type InvalidationRecord,
  SelectorSchema,
} from "./gen/infercache/v1/admin_pb.js";
import {
  type CacheKey,
  CacheService,
  type Chunk,
  ChunkBoundarySchema,
  ComputeCostSchema,
  type GetServerInfoResponse,
  type LookupResponse,
  type LookupStreamHeader,
  type LookupStreamResponse,
  PacingMode,
  PacingSchema,
  type ReportOutcomeResponse,
  ReportOutcomeVerdict,
  RequestTraitsSchema,
  type StoreResponse,
  type StoreStreamRequest,
  StoreStreamRequestSchema,
  type StoreStreamResponse,
} from "./gen/infercache/v1/cache_pb.js";

export * from "./gen/grpc/health/v1/health_pb.js";
export * from "./gen/infercache/v1/admin_pb.js";
export * from "./gen/infercache/v1/cache_pb.js";
export * from "./gen/infercache/v1/kv_pb.js";
export { type ChatMessageInit, type ContentPartInit, type KeyInit, makeKey, type ToolCallInit } from "./keys.js";

/** Canonical JSON (sorted keys, no spaces) as Python's json.dumps(sort_keys=True) writes it
 * for strings, integers, booleans, null, arrays and objects. makeKey does not use it: key
 * schema v2 keys tools by their text as sent, since templates render keys in their order. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(",")}}`;
  }
  if (typeof value === "number" && !Number.isInteger(value)) {
    // Python writes 1.0 where JavaScript writes 1: only integers agree, so refuse the rest.
    throw new Error("tool definitions may hold integers only, not fractional numbers");
  }
  return JSON.stringify(value);
}

/** What a request declares about itself; the sidecar's policy decides whether it bypasses. */
export function makeTraits(init: MessageInitShape<typeof RequestTraitsSchema> = {}) {
  return create(RequestTraitsSchema, init);
}

/** LookupStream pacing: tokensPerSecond, or the original timing with each gap capped. */
export function makePacing(opts: { tokensPerSecond?: number; originalMaxDelayMs?: number }) {
  if (opts.tokensPerSecond !== undefined) {
    return create(PacingSchema, {
      mode: PacingMode.TOKENS_PER_SECOND,
      tokensPerSecond: opts.tokensPerSecond,
    });
  }
  if (opts.originalMaxDelayMs !== undefined) {
    return create(PacingSchema, { mode: PacingMode.ORIGINAL, maxDelayMs: opts.originalMaxDelayMs });
  }
  return create(PacingSchema, { mode: PacingMode.FASTEST });
}

/** A gRPC (HTTP/2, plaintext) transport to "host:port" or a full "http://host:port" URL. */
export function grpcTransport(target: string): Transport {
  const baseUrl = target.includes("://") ? target : `http://${target}`;
  return createGrpcTransport({ baseUrl });
}

type Bytes = Uint8Array | string;
const encoder = new TextEncoder();
const toBytes = (b: Bytes): Uint8Array => (typeof b === "string" ? encoder.encode(b) : b);

export interface LookupOptions {
  /** Wait this long for a result another caller is computing (single-flight). */
  waitMs?: number;
  maxAgeSeconds?: number;
  traits?: MessageInitShape<typeof RequestTraitsSchema>;
  /** Deadline of the call; default 1 s plus waitMs. */
  timeoutMs?: number;
}

export interface StoreOptions {
  /** The lease of the MISS this result answers (required unless the sidecar allows unleased stores). */
  lease?: Uint8Array;
  ttlSeconds?: number;
  cost?: MessageInitShape<typeof ComputeCostSchema>;
  traits?: MessageInitShape<typeof RequestTraitsSchema>;
  chunks?: MessageInitShape<typeof ChunkBoundarySchema>[];
  timeoutMs?: number;
}

/** A LookupStream call: `await header()`, then `for await (const chunk of stream)` (HIT only). */
export class LookupStream implements AsyncIterable<Chunk> {
  private readonly responses: AsyncIterator<LookupStreamResponse>;
  private first: Promise<LookupStreamHeader> | undefined;

  constructor(
    responses: AsyncIterable<LookupStreamResponse>,
    private readonly abort: AbortController,
  ) {
    this.responses = responses[Symbol.asyncIterator]();
  }

  /** The first message: outcome, tier, age, key digest, chunk count; the lease on a MISS. */
  header(): Promise<LookupStreamHeader> {
    this.first ??= this.responses.next().then((r) => {
      if (r.done || r.value.message.case !== "header") {
        throw new Error("LookupStream: the first message is not a header");
      }
      return r.value.message.value;
    });
    return this.first;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Chunk> {
    await this.header();
    for (;;) {
      const r = await this.responses.next();
      if (r.done) return;
      if (r.value.message.case === "chunk") yield r.value.message.value;
    }
  }

  /** Stop the replay; the sidecar sends nothing further. */
  cancel(): void {
    this.abort.abort();
  }
}

/** Writes one StoreStream: send() chunks, optionally finish(); see CacheClient.storeStream. */
export class StoreStreamWriter {
  private finishMessage: StoreStreamRequest | undefined;
  private closed = false;

  constructor(private readonly push: (msg: StoreStreamRequest) => void) {}

  /** The next piece of the result (offsetMs 0: the sidecar uses the arrival time). */
  send(data: Bytes, opts: { tokens?: number; offsetMs?: number } = {}): void {
    if (this.finishMessage !== undefined || this.closed) throw new Error("send() after finish()");
    this.push(
      create(StoreStreamRequestSchema, {
        message: {
          case: "chunk",
          value: { data: toBytes(data), tokens: opts.tokens ?? 0, offsetMs: opts.offsetMs ?? 0 },
        },
      }),
    );
  }

  /** The finish reason (and cost) to commit with when the body returns; default "stop". */
  finish(reason = "stop", cost?: MessageInitShape<typeof ComputeCostSchema>): void {
    this.finishMessage = create(StoreStreamRequestSchema, {
      message: { case: "finish", value: { finishReason: reason, cost } },
    });
  }

  /** @internal */
  finishOrStop(): StoreStreamRequest {
    this.closed = true;
    return (
      this.finishMessage ??
      create(StoreStreamRequestSchema, { message: { case: "finish", value: { finishReason: "stop" } } })
    );
  }
}

/** A queue the writer pushes into and the client-streaming call reads from. */
class RequestQueue implements AsyncIterable<StoreStreamRequest> {
  private readonly items: StoreStreamRequest[] = [];
  private wake: (() => void) | undefined;
  private ended = false;

  push(msg: StoreStreamRequest): void {
    this.items.push(msg);
    this.wake?.();
  }

  end(): void {
    this.ended = true;
    this.wake?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<StoreStreamRequest> {
    for (;;) {
      const next = this.items.shift();
      if (next !== undefined) {
        yield next;
      } else if (this.ended) {
        return;
      } else {
        await new Promise<void>((resolve) => (this.wake = resolve));
        this.wake = undefined;
      }
    }
  }
}

/** The data plane (CacheService). `target`: "host:port", an http:// URL, or a Transport. */
export class CacheClient {
  readonly raw: Client<typeof CacheService>;
  private readonly health: Client<typeof Health>;

  constructor(target: string | Transport) {
    const transport = typeof target === "string" ? grpcTransport(target) : target;
    this.raw = createClient(CacheService, transport);
    this.health = createClient(Health, transport);
  }

  /** HIT (payload), MISS (with `lease` for store) or BYPASS (`bypassCode`: do not store). */
  lookup(key: CacheKey, opts: LookupOptions = {}): Promise<LookupResponse> {
    return this.raw.lookup(
      { key, waitMs: opts.waitMs ?? 0, maxAgeSeconds: opts.maxAgeSeconds ?? 0, traits: opts.traits },
      { timeoutMs: opts.timeoutMs ?? 1000 + (opts.waitMs ?? 0) },
    );
  }

  /** Many lookups in one RPC; answers keep the order of `keys`. */
  async lookupBatch(keys: CacheKey[], opts: { timeoutMs?: number } = {}): Promise<LookupResponse[]> {
    const resp = await this.raw.lookupBatch(
      { requests: keys.map((key) => ({ key })) },
      { timeoutMs: opts.timeoutMs ?? 5000 },
    );
    return resp.responses;
  }

  /** Store a result with the MISS's lease; `outcome` says STORED or why not. */
  store(key: CacheKey, payload: Bytes, opts: StoreOptions = {}): Promise<StoreResponse> {
    return this.raw.store(
      {
        key,
        payload: toBytes(payload),
        lease: opts.lease ?? new Uint8Array(),
        ttlSeconds: opts.ttlSeconds ?? 0,
        cost: opts.cost,
        traits: opts.traits,
        chunks: opts.chunks ?? [],
      },
      { timeoutMs: opts.timeoutMs ?? 5000 },
    );
  }

  /** Lookup as a stream: the header, then on a HIT the original chunks (paced if asked). */
  lookupStream(
    key: CacheKey,
    opts: LookupOptions & { pacing?: MessageInitShape<typeof PacingSchema> } = {},
  ): LookupStream {
    const abort = new AbortController();
    const responses = this.raw.lookupStream(
      {
        lookup: { key, waitMs: opts.waitMs ?? 0, maxAgeSeconds: opts.maxAgeSeconds ?? 0, traits: opts.traits },
        pacing: opts.pacing,
      },
      { signal: abort.signal, timeoutMs: opts.timeoutMs },
    );
    return new LookupStream(responses, abort);
  }

  /**
   * Store a result while it is generated. `body` sends chunks through the writer; the
   * entry is committed only when `body` resolves (finish reason "stop" unless
   * writer.finish() named another). When `body` throws, the stream is half-closed
   * without a finish message, the sidecar stores nothing (and releases the key's
   * single-flight hold at once), and the error is rethrown.
   */
  async storeStream<T>(
    key: CacheKey,
    lease: Uint8Array,
    body: (writer: StoreStreamWriter) => Promise<T>,
    opts: Omit<StoreOptions, "lease" | "chunks"> = {},
  ): Promise<{ result: T; response: StoreStreamResponse }> {
    const queue = new RequestQueue();
    queue.push(
      create(StoreStreamRequestSchema, {
        message: {
          case: "open",
          value: {
            key,
            lease,
            ttlSeconds: opts.ttlSeconds ?? 0,
            cost: opts.cost,
            traits: opts.traits,
          },
        },
      }),
    );
    const call = this.raw.storeStream(queue, { timeoutMs: opts.timeoutMs });
    const writer = new StoreStreamWriter((msg) => queue.push(msg));
    let result: T;
    try {
      result = await body(writer);
    } catch (err) {
      queue.end(); // no finish message: nothing is committed
      await call.catch(() => undefined); // the expected "ended without a finish message"
      throw err;
    }
    queue.push(writer.finishOrStop());
    queue.end();
    return { result, response: await call };
  }

  /** A downstream check's verdict on a cached answer (by the hit's key digest). */
  reportOutcome(keyDigest: Uint8Array, accepted: boolean, reason = ""): Promise<ReportOutcomeResponse> {
    return this.raw.reportOutcome(
      {
        keyDigest,
        verdict: accepted ? ReportOutcomeVerdict.ACCEPTED : ReportOutcomeVerdict.REJECTED,
        reason,
      },
      { timeoutMs: 5000 },
    );
  }

  /** Server version, key schema version, the pod's model fingerprint, warm tier. */
  serverInfo(opts: { timeoutMs?: number } = {}): Promise<GetServerInfoResponse> {
    return this.raw.getServerInfo({}, { timeoutMs: opts.timeoutMs ?? 1000 });
  }

  /** True when grpc.health.v1 says SERVING (overall, or for `service`). */
  async serving(service = "", opts: { timeoutMs?: number } = {}): Promise<boolean> {
    const resp = await this.health.check({ service }, { timeoutMs: opts.timeoutMs ?? 1000 });
    return resp.status === HealthCheckResponse_ServingStatus.SERVING;
  }
}

/** The admin plane (AdminService) with a bearer token. */
export class AdminClient {
  readonly raw: Client<typeof AdminService>;
  private readonly headers: Record<string, string>;

  constructor(target: string | Transport, token: string) {
    this.raw = createClient(AdminService, typeof target === "string" ? grpcTransport(target) : target);
    this.headers = { authorization: `Bearer ${token}` };
  }

  /**
   * Invalidate every entry matching all the named dimensions (or `all`), fleet-wide;
   * resolves with the audit record only once every sidecar sharing the store confirmed.
   */
  async invalidate(
    selector: MessageInitShape<typeof SelectorSchema>,
    reason: string,
    opts: { timeoutMs?: number } = {},
  ): Promise<InvalidationRecord> {
    const resp = await this.raw.invalidate(
      { selector: create(SelectorSchema, selector), reason },
      { headers: this.headers, timeoutMs: opts.timeoutMs ?? 30_000 },
    );
    if (resp.record === undefined) throw new Error("Invalidate answered without a record");
    return resp.record;
  }
}
