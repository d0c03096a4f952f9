// makeKey against the golden vectors Python writes (tests/support/key_vectors.py, `make
// key-vectors`): the same CacheKey bytes as the Python client's make_key for every request,
// the digest the sidecar computes for each, and an Error for every input Python refuses.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";

import { equals, fromBinary, toBinary } from "@bufbuild/protobuf";

import { type CacheClient, CacheKeySchema, type KeyInit, makeKey } from "../src/index.js";

interface Vector {
  name: string;
  init: unknown;
  key: string;
  digest: string;
  same_as?: string;
}

interface Refusal {
  name: string;
  init: unknown;
  error: string;
}

const hex = (b: Uint8Array): string => Buffer.from(b).toString("hex");

/** The file's markers back to values: {"$bytes": hex} and {"$bigint": decimal}. */
function decode(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(decode);
  if (value !== null && typeof value === "object") {
    const o = value as Record<string, unknown>;
    if (typeof o.$bytes === "string") return new Uint8Array(Buffer.from(o.$bytes, "hex"));
    if (typeof o.$bigint === "string") return BigInt(o.$bigint);
    return Object.fromEntries(Object.entries(o).map(([k, v]) => [k, decode(v)]));
  }
  return value;
}

export function keyVectorTests(repo: string, cache: () => CacheClient): void {
  const file = join(repo, "clients/typescript/test/key-vectors.json");
  const { vectors, refusals } = JSON.parse(readFileSync(file, "utf8")) as {
    vectors: Vector[];
    refusals: Refusal[];
  };

  describe("golden key vectors (written by Python's make_key)", () => {
    test("makeKey writes the CacheKey bytes make_key writes, for every vector", () => {
      assert.ok(vectors.length >= 100, `only ${vectors.length} vectors`);
      const reordered: string[] = [];
      for (const v of vectors) {
        const got = makeKey(decode(v.init) as KeyInit);
        const want = fromBinary(CacheKeySchema, Buffer.from(v.key, "hex"));
        assert.ok(equals(CacheKeySchema, got, want), `${v.name}: another message than Python's`);
        if (hex(toBinary(CacheKeySchema, want)) !== v.key) {
          // An integer-keyed map (logit_bias) of several entries: Python writes them in
          // upb's order (descending), a JavaScript object enumerates integer keys ascending,
          // so no protobuf-es message writes Python's bytes. Map order is free on the wire
          // and the digest ignores it: the message is equal (above) and the sidecar's digest
          // is the vector's (below).
          reordered.push(v.name);
        } else {
          assert.equal(hex(toBinary(CacheKeySchema, got)), v.key, v.name);
        }
      }
      const biased = vectors.filter((v) => {
        const init = decode(v.init) as { sampling?: { logitBias?: object } };
        return Object.keys(init.sampling?.logitBias ?? {}).length > 1;
      });
      assert.deepEqual(reordered, biased.map((v) => v.name));
    });

    test("the sidecar computes the vector's digest for makeKey's key", async () => {
      const keys = vectors.map((v) => makeKey(decode(v.init) as KeyInit));
      const answers = await cache().lookupBatch(keys);
      assert.equal(answers.length, vectors.length);
      answers.forEach((a, i) => assert.equal(hex(a.keyDigest), vectors[i]?.digest, vectors[i]?.name));
      // Distinct requests are distinct keys; same_as pairs are one key (the sidecar says so).
      const byName = new Map(vectors.map((v) => [v.name, v.digest]));
      for (const v of vectors) {
        if (v.same_as !== undefined) assert.equal(v.digest, byName.get(v.same_as), v.name);
      }
      const distinct = vectors.filter((v) => v.same_as === undefined).map((v) => v.digest);
      assert.equal(new Set(distinct).size, distinct.length);
    });

    test("makeKey refuses every input make_key refuses, with an Error naming the problem", () => {
      assert.ok(refusals.length >= 50, `only ${refusals.length} refusals`);
      for (const r of refusals) {
        assert.throws(
          () => makeKey(decode(r.init) as KeyInit),
          (err: unknown) => {
            assert.ok(err instanceof Error, `${r.name}: not an Error`);
            assert.match(err.message, new RegExp(r.error), r.name);
            return true;
          },
          `${r.name}: makeKey accepted it`,
        );
      }
    });
  });
}
