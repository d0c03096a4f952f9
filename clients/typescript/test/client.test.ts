// The TypeScript client against a live sidecar: `infercache serve` from the repository's
// venv (embedded store, free ports), started and stopped by this file.

import assert from "node:assert/strict";
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { once } from "node:events";
import { createServer } from "node:net";
import { dirname, join, resolve } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import { Code, ConnectError } from "@connectrpc/connect";

import {
  AdminClient,
  CacheClient,
  canonicalJson,
  LookupOutcome,
  makeKey,
  makePacing,
  StoreOutcome,
} from "../src/index.js";
import { keyVectorTests } from "./key-vectors.js";

// dist/test/ -> the repository root.
const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");
const INFERCACHE = process.env.INFERCACHE_BIN ?? join(REPO, ".venv/bin/infercache");
const PYTHON = process.env.INFERCACHE_PYTHON ?? join(REPO, ".venv/bin/python");
const TOKEN = "ts-admin-token-0123456789abcdef";

async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const address = server.address();
  server.close();
  assert.ok(address !== null && typeof address === "object");
  return address.port;
}

let sidecar: ChildProcess;
let stderr = "";
let data = "";
let admin = "";
let cache: CacheClient;

async function waitServing(client: CacheClient, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    assert.equal(sidecar.exitCode, null, `sidecar exited early:\n${stderr}`);
    try {
      if (await client.serving("", { timeoutMs: 500 })) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`sidecar not SERVING within ${timeoutMs} ms:\n${stderr}`);
}

const key = (text: string, extra: Partial<Parameters<typeof makeKey>[0]> = {}) =>
  makeKey({
    tenant: "acme",
    modelVersion: "fp1-ts",
    promptVersion: "p1",
    text,
    sampling: { temperature: 0 },
    ...extra,
  });

before(async () => {
  data = `127.0.0.1:${await freePort()}`;
  admin = `127.0.0.1:${await freePort()}`;
  sidecar = spawn(
    INFERCACHE,
    ["serve", "--listen", data, "--admin-listen", admin, "--metrics-listen", "", "--uvloop", "false"],
    {
      env: { ...process.env, INFERCACHE_ADMIN_TOKENS: `ts=${TOKEN}`, INFERCACHE_GRACE_PERIOD_S: "1" },
      stdio: ["ignore", "ignore", "pipe"],
    },
  );
  sidecar.stderr?.on("data", (b: Buffer) => (stderr += b.toString()));
  cache = new CacheClient(data);
  await waitServing(cache, 30_000);
});

after(async () => {
  const exited = once(sidecar, "exit");
  sidecar.kill("SIGTERM");
  const [code] = (await exited) as [number | null];
  assert.equal(code, 0, `sidecar exit status after SIGTERM:\n${stderr}`);
});

describe("data plane", () => {
  test("a MISS carries a lease; a store with it is a HIT with the same bytes", async () => {
    const k = key("reset my password");
    const miss = await cache.lookup(k);
    assert.equal(miss.outcome, LookupOutcome.MISS);
    assert.ok(miss.lease.length > 0);
    const stored = await cache.store(k, "open Settings", { lease: miss.lease, ttlSeconds: 60 });
    assert.equal(stored.outcome, StoreOutcome.STORED);
    const hit = await cache.lookup(k);
    assert.equal(hit.outcome, LookupOutcome.HIT);
    assert.equal(new TextDecoder().decode(hit.payload), "open Settings");
    assert.equal(hit.keyDigest.length, 32);
  });

  test("a store without a lease is FAILED_PRECONDITION, nothing is cached", async () => {
    const k = key("no lease");
    await assert.rejects(
      cache.store(k, "x"),
      (err: unknown) => ConnectError.from(err).code === Code.FailedPrecondition,
    );
    assert.equal((await cache.lookup(k)).outcome, LookupOutcome.MISS);
  });

  test("keys built here are the keys Python builds: Python's client HITs what TypeScript stored", async () => {
    const tools = [{ type: "function", function: { name: "lookup", parameters: { b: 1, a: [true, null] } } }];
    const k = key("cross-language", { tools, chat: undefined });
    const miss = await cache.lookup(k);
    await cache.store(k, "from typescript", { lease: miss.lease });
    const script = [
      "import sys",
      "from infercache.v1 import cache_pb2 as pb",
      "from infercache_client import CacheClient, make_key",
      "tools = [{'type': 'function', 'function': {'name': 'lookup', 'parameters': {'b': 1, 'a': [True, None]}}}]",
      "k = make_key(tenant='acme', model_version='fp1-ts', prompt_version='p1', text='cross-language', temperature=0.0, tools=tools)",
      "reordered = [{'function': {'parameters': {'a': [True, None], 'b': 1}, 'name': 'lookup'}, 'type': 'function'}]",
      "k2 = make_key(tenant='acme', model_version='fp1-ts', prompt_version='p1', text='cross-language', temperature=0.0, tools=reordered)",
      "with CacheClient(sys.argv[1]) as c:",
      "    r = c.lookup(k)",
      "    assert r.outcome == pb.LOOKUP_OUTCOME_HIT, r",
      "    # Key order is rendered into the prompt: another order is another key.",
      "    assert c.lookup(k2).outcome == pb.LOOKUP_OUTCOME_MISS",
      "    print(r.payload.decode())",
    ].join("\n");
    const out = execFileSync(PYTHON, ["-c", script, data], { encoding: "utf8" });
    assert.equal(out.trim(), "from typescript");
  });

  test("canonical JSON sorts keys at every depth and refuses fractions", () => {
    assert.equal(canonicalJson({ b: [1, { d: 1, c: "é" }], a: null }), '{"a":null,"b":[1,{"c":"é","d":1}]}');
    assert.throws(() => canonicalJson({ temperature: 0.5 }));
  });

  test("a missing tenant is INVALID_ARGUMENT naming the field", async () => {
    await assert.rejects(
      cache.lookup(makeKey({ tenant: "", promptVersion: "p1", text: "x" })),
      (err: unknown) => {
        const e = ConnectError.from(err);
        assert.equal(e.code, Code.InvalidArgument);
        assert.match(e.rawMessage, /key\.tenant/);
        return true;
      },
    );
  });

  test("batch lookups answer in order", async () => {
    const answers = await cache.lookupBatch([key("reset my password"), key("never stored")]);
    assert.deepEqual(
      answers.map((a) => a.outcome),
      [LookupOutcome.HIT, LookupOutcome.MISS],
    );
  });

  test("server info names the version and the warm tier", async () => {
    const info = await cache.serverInfo();
    assert.match(info.serverVersion, /^\d+\.\d+\.\d+/);
    assert.equal(info.warmTier, "embedded");
  });
});

keyVectorTests(REPO, () => cache);

describe("makeKey refusals of its own (what JavaScript values cannot say as Python's can)", () => {
  const base = { tenant: "acme", modelVersion: "m", promptVersion: "p" };
  const cases: [string, Record<string, unknown>, RegExp][] = [
    ["NaN in a tool (JSON.stringify writes null)", { text: "x", tools: [{ a: Number.NaN }] }, /tools\[0\]\.a holds NaN/],
    ["Infinity in chat_template_kwargs", { text: "x", chatTemplate: { chatTemplateKwargs: { t: Infinity } } }, /holds Infinity/],
    ["undefined in a JSON array (JSON.stringify writes null)", { text: "x", tools: [[1, undefined]] }, /tools\[0\]\[1\] is undefined/],
    ["a Map in a tool (JSON.stringify writes {})", { text: "x", tools: [{ m: new Map([["a", 1]]) }] }, /is not JSON/],
    ["a bigint in a tool", { text: "x", tools: [{ n: 1n }] }, /is not JSON/],
    ["a seed beyond 2**53 as a number", { text: "x", sampling: { seed: 2 ** 60 } }, /give it as a bigint/],
    ["a snake_case sampling field", { text: "x", sampling: { max_tokens: 5 } }, /max_tokens is not a field of SamplingParams \(did you mean maxTokens\?\)/],
    ["a snake_case key field", { text: "x", prompt_version: "p" }, /prompt_version is not a makeKey field/],
    [
      "a camelCase message field (messages are spelled as sent)",
      { chat: [{ role: "tool", content: "1", toolCallId: "c1" }] },
      /messages\[0\]\.toolCallId is not a message field \(did you mean tool_call_id\?\)/,
    ],
    ["a lone surrogate in an object key of a tool", { text: "x", tools: [{ "\ud800": 1 }] }, /not valid Unicode/],
    ["a lone surrogate in an extra key", { text: "x", extra: { "\udfff": "v" } }, /extra key is not valid Unicode/],
    [
      // { b, "2" } and { "2", b } are one JavaScript object: two tool definitions, one key.
      "integer-like keys beside others in a tool (their order is lost)",
      { text: "x", tools: [{ type: "function", parameters: { properties: { b: {}, "2": {} } } }] },
      /tools\[0\]\.parameters\.properties has integer-like keys \("2"\)/,
    ],
    ["integer-like keys only, in chat_template_kwargs", { text: "x", chatTemplate: { chatTemplateKwargs: { "10": 1, "9": 2 } } }, /has integer-like keys/],
  ];
  for (const [name, init, error] of cases) {
    test(name, () => {
      assert.throws(() => makeKey({ ...base, ...init } as unknown as Parameters<typeof makeKey>[0]), error);
    });
  }

  test("one integer-like key alone keeps its key (no order to lose)", () => {
    const key = makeKey({ ...base, text: "x", tools: [{ "2": "two" }] });
    assert.deepEqual(key.tools, ['{"2":"two"}']);
  });

  test("a seed within 2**53 as a number is the same key as its bigint", () => {
    const n = makeKey({ ...base, text: "x", sampling: { seed: 2 ** 53 - 1 } });
    const b = makeKey({ ...base, text: "x", sampling: { seed: 2n ** 53n - 1n } });
    assert.deepEqual(n.sampling?.seed, b.sampling?.seed);
  });
});

describe("streams", () => {
  test("a streamed store commits on finish; the replay has the original chunks, flagged cached", async () => {
    const k = key("stream me");
    const stream = cache.lookupStream(k);
    const header = await stream.header();
    assert.equal(header.lookup?.outcome, LookupOutcome.MISS);
    const lease = header.lookup?.lease ?? new Uint8Array();
    const pieces = ["Open ", "Settings, ", "then ", "Reset."];
    const { response } = await cache.storeStream(k, lease, async (w) => {
      for (const p of pieces) w.send(p, { tokens: 1 });
      w.finish("length");
    });
    assert.equal(response.store?.outcome, StoreOutcome.STORED);
    assert.equal(response.chunkCount, pieces.length);

    const replay = cache.lookupStream(k, { pacing: makePacing({ tokensPerSecond: 1000 }) });
    const head = await replay.header();
    assert.equal(head.lookup?.outcome, LookupOutcome.HIT);
    assert.equal(head.chunkCount, pieces.length);
    assert.equal(head.finishReason, "length");
    const chunks = [];
    for await (const c of replay) chunks.push(c);
    assert.deepEqual(
      chunks.map((c) => new TextDecoder().decode(c.data)),
      pieces,
    );
    assert.ok(chunks.every((c) => c.cached));
  });

  test("a body that throws stores nothing and frees the key at once", async () => {
    const k = key("generation fails");
    const miss = await cache.lookup(k);
    await assert.rejects(
      cache.storeStream(k, miss.lease, async (w) => {
        w.send("half an ans");
        throw new Error("model crashed");
      }),
      /model crashed/,
    );
    // Not stored, and the single-flight hold is gone: a new MISS, not a wait.
    const again = await cache.lookup(k, { waitMs: 0 });
    assert.equal(again.outcome, LookupOutcome.MISS);
    assert.ok(again.lease.length > 0);
  });
});

describe("feedback and admin", () => {
  test("a rejected hit is evicted: the next lookup misses", async () => {
    const k = key("graded badly");
    const miss = await cache.lookup(k);
    await cache.store(k, "wrong answer", { lease: miss.lease });
    const hit = await cache.lookup(k);
    assert.equal(hit.outcome, LookupOutcome.HIT);
    const verdict = await cache.reportOutcome(hit.keyDigest, false, "grader");
    assert.equal(verdict.evicted, true);
    assert.equal((await cache.lookup(k)).outcome, LookupOutcome.MISS);
  });

  test("invalidate with the token: the audit record comes back and the entry is gone", async () => {
    const k = key("to invalidate", { promptVersion: "p-old" });
    const miss = await cache.lookup(k);
    await cache.store(k, "old template's answer", { lease: miss.lease });
    assert.equal((await cache.lookup(k)).outcome, LookupOutcome.HIT);
    const record = await new AdminClient(admin, TOKEN).invalidate({ promptVersion: "p-old" }, "ts test");
    assert.ok(record.epoch > 0n);
    assert.equal(record.caller, "ts");
    assert.equal((await cache.lookup(k)).outcome, LookupOutcome.MISS);
  });

  test("a wrong token is UNAUTHENTICATED", async () => {
    await assert.rejects(
      new AdminClient(admin, "not-the-token-0123456789").invalidate({ all: true }, "no"),
      (err: unknown) => ConnectError.from(err).code === Code.Unauthenticated,
    );
  });
});
