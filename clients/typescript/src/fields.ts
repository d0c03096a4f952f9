// Checked message inits: what makeKey puts into a CacheKey, refused as Python's protobuf
// refuses it (unknown field, wrong type, out of range, lone surrogate) instead of being
// dropped or coerced by create(), which ignores unknown keys and checks nothing.

import { type DescField, type DescMessage, ScalarType } from "@bufbuild/protobuf";

/** A plain object (not an array, not null, not a Uint8Array or other class instance). */
export function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (value === null || typeof value !== "object") return false;
  const proto = Object.getPrototypeOf(value) as unknown;
  return proto === Object.prototype || proto === null;
}

const describe = (v: unknown): string =>
  v === null ? "null" : Array.isArray(v) ? "an array" : v instanceof Uint8Array ? "bytes" : `a ${typeof v}`;

/** `value` itself when it is a string of well-formed Unicode; the sidecar refuses the rest. */
export function checkString(value: unknown, path: string): string {
  if (typeof value !== "string") throw new Error(`${path} must be a string, not ${describe(value)}`);
  if (!value.isWellFormed()) {
    // TextEncoder would write U+FFFD: two different strings would become one key.
    throw new Error(`${path} is not valid Unicode (it holds a lone surrogate)`);
  }
  return value;
}

/** Orders strings as their UTF-8 bytes (code points), as Python's deterministic encoding
 * sorts map keys; JavaScript's default sort compares UTF-16 code units. */
export function byCodePoint(a: string, b: string): number {
  const x = [...a];
  const y = [...b];
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const d = (x[i]?.codePointAt(0) ?? 0) - (y[i]?.codePointAt(0) ?? 0);
    if (d !== 0) return d;
  }
  return x.length - y.length;
}

/** JSON text as Python's json.dumps(separators=(",", ":"), ensure_ascii=False) writes it,
 * key order kept (templates render keys in the order given). Values JSON.stringify would
 * turn into something else (NaN into null, a Map into {}) are refused. */
export function jsonText(value: unknown, path: string): string {
  checkJson(value, path);
  return JSON.stringify(value);
}

function checkJson(value: unknown, path: string): void {
  if (value === null || typeof value === "boolean") return;
  if (typeof value === "string") {
    checkString(value, path);
  } else if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new Error(`${path} holds ${value}, which JSON cannot carry`);
  } else if (Array.isArray(value)) {
    value.forEach((v: unknown, i) => {
      if (v === undefined) throw new Error(`${path}[${i}] is undefined, which JSON cannot carry`);
      checkJson(v, `${path}[${i}]`);
    });
  } else if (isPlainObject(value)) {
    const keys = Object.keys(value);
    const indexLike = keys.filter(isIndexKey);
    if (keys.length > 1 && indexLike.length > 0) {
      // A JavaScript object lists such keys first, ascending, whatever order they were
      // written in: two objects that differ only in that order would make one key.
      throw new Error(
        `${path} has integer-like keys (${indexLike.slice(0, 3).map((k) => JSON.stringify(k)).join(", ")}), ` +
          "whose order a JavaScript object does not keep; give this option as its JSON text",
      );
    }
    for (const [k, v] of Object.entries(value)) {
      checkString(k, `${path} key`);
      if (v !== undefined) checkJson(v, `${path}.${k}`);
    }
  } else {
    throw new Error(`${path} holds ${describe(value)}, which is not JSON`);
  }
}

/** An array-index key ("0", "7", "10"; below 2**32 - 1): the keys a JavaScript object reorders. */
function isIndexKey(key: string): boolean {
  return /^(?:0|[1-9][0-9]*)$/.test(key) && Number(key) < 2 ** 32 - 1;
}

const INT32: readonly [number, number] = [-(2 ** 31), 2 ** 31 - 1];
const UINT32: readonly [number, number] = [0, 2 ** 32 - 1];
const INT64 = [-(2n ** 63n), 2n ** 63n - 1n] as const;
const UINT64 = [0n, 2n ** 64n - 1n] as const;

function integer(value: unknown, path: string, [lo, hi]: readonly [number, number]): number {
  if (typeof value !== "number" || !Number.isInteger(value)) {
    throw new Error(`${path} must be an integer, not ${typeof value === "number" ? value : describe(value)}`);
  }
  if (value < lo || value > hi) throw new Error(`${path} is out of range: ${value}`);
  return value;
}

function integer64(value: unknown, path: string, [lo, hi]: readonly [bigint, bigint]): bigint {
  let big: bigint;
  if (typeof value === "bigint") big = value;
  else if (typeof value === "number" && Number.isSafeInteger(value)) big = BigInt(value);
  else if (typeof value === "number" && Number.isInteger(value)) {
    // 2**53 + 1 typed as a number is already 2**53: the caller meant another seed.
    throw new Error(`${path} ${value} is beyond 2**53: give it as a bigint`);
  } else throw new Error(`${path} must be an integer, not ${describe(value)}`);
  if (big < lo || big > hi) throw new Error(`${path} is out of range: ${big}`);
  return big;
}

/** One scalar checked for its protobuf type (int64 as bigint). */
export function scalar(type: ScalarType, value: unknown, path: string): unknown {
  switch (type) {
    case ScalarType.STRING:
      return checkString(value, path);
    case ScalarType.BOOL:
      if (typeof value !== "boolean") throw new Error(`${path} must be a boolean, not ${describe(value)}`);
      return value;
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      if (typeof value !== "number") throw new Error(`${path} must be a number, not ${describe(value)}`);
      return value;
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
      return integer(value, path, INT32);
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return integer(value, path, UINT32);
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
      return integer64(value, path, INT64);
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return integer64(value, path, UINT64);
    case ScalarType.BYTES:
      if (!(value instanceof Uint8Array)) throw new Error(`${path} must be a Uint8Array, not ${describe(value)}`);
      return value;
  }
}

function enumValue(field: DescField & { fieldKind: "enum" }, value: unknown, path: string): number {
  if (typeof value === "string") {
    // Python's protobuf takes an enum value by its full name too.
    const found = field.enum.values.find((v) => v.name === value);
    if (found === undefined) throw new Error(`${path}: unknown ${field.enum.name} name ${JSON.stringify(value)}`);
    return found.number;
  }
  return integer(value, path, INT32); // proto3 enums are open, as in Python
}

function mapEntries(field: DescField & { fieldKind: "map" }, value: unknown, path: string): object {
  if (!isPlainObject(value)) throw new Error(`${path} must be an object, not ${describe(value)}`);
  const entries: [string, unknown][] = [];
  for (const [k, v] of Object.entries(value)) {
    let key = checkString(k, `${path} key`);
    if (field.mapKey !== ScalarType.STRING) {
      // Object keys are strings: only an integer's own spelling names a token id.
      const n = Number(k);
      if (!/^-?\d+$/.test(k) || String(n) !== k) throw new Error(`${path} key ${JSON.stringify(k)} is not an integer`);
      key = String(scalar(field.mapKey, n, `${path} key`));
    }
    if (field.mapKind !== "scalar") throw new Error(`${path}: only scalar maps are keyed`);
    entries.push([key, scalar(field.scalar, v, `${path}[${k}]`)]);
  }
  // String keys in the order Python's deterministic encoding writes them (integer keys are
  // enumerated in JavaScript's own order whatever the insertion); the digest ignores order.
  if (field.mapKey === ScalarType.STRING) entries.sort(([a], [b]) => byCodePoint(a, b));
  return Object.fromEntries(entries);
}

function fieldValue(field: DescField, value: unknown, path: string): unknown {
  switch (field.fieldKind) {
    case "scalar":
      return scalar(field.scalar, value, path);
    case "enum":
      return enumValue(field, value, path);
    case "message":
      return checkedInit(field.message, value, `${path}.`);
    case "map":
      return mapEntries(field, value, path);
    case "list": {
      if (!Array.isArray(value)) throw new Error(`${path} takes an array, not ${describe(value)}`);
      return value.map((v: unknown, i) => {
        const p = `${path}[${i}]`;
        if (field.listKind === "scalar") return scalar(field.scalar, v, p);
        if (field.listKind === "message") return checkedInit(field.message, v, `${p}.`);
        return integer(v, p, INT32);
      });
    }
  }
}

/** `value` as an init for `desc` with every field checked; null and undefined are unset.
 * `path` prefixes field names in errors ("sampling."). */
export function checkedInit(desc: DescMessage, value: unknown, path: string): Record<string, unknown> {
  if (!isPlainObject(value)) {
    const given = value as { $typeName?: unknown } | null;
    if (given?.$typeName !== desc.typeName) {
      throw new Error(`${path.replace(/\.$/, "")} must be an object of ${desc.name} fields, not ${describe(value)}`);
    }
  }
  const out: Record<string, unknown> = {};
  for (const [name, v] of Object.entries(value as Record<string, unknown>)) {
    if (name === "$typeName") {
      if (v !== desc.typeName) throw new Error(`${path}$typeName ${String(v)} is not ${desc.typeName}`);
      continue;
    }
    const field = desc.field[name];
    if (field === undefined) {
      const snake = desc.fields.find((f) => f.name === name && f.localName !== name);
      const hint = snake === undefined ? "" : ` (did you mean ${snake.localName}?)`;
      throw new Error(`${path}${name} is not a field of ${desc.name}${hint}`);
    }
    if (v === undefined || v === null) continue; // unset, as Python's None
    out[name] = fieldValue(field, v, path + name);
  }
  return out;
}
