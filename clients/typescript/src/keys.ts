// makeKey: the request as the sidecar will hash it, the same CacheKey the Python client's
// make_key builds for the same request (test/key-vectors.json holds both sides' answers).

import { create, type DescMessage, type MessageInitShape, ScalarType } from "@bufbuild/protobuf";

import {
  type CacheKey,
  CacheKeySchema,
  ChatTemplateOptionsSchema,
  OutputOptionsSchema,
  SamplingParamsSchema,
} from "./gen/infercache/v1/cache_pb.js";
import { type ChatMessageInit, chatMessage } from "./chat.js";
import { byCodePoint, checkedInit, checkString, isPlainObject, jsonText, scalar } from "./fields.js";

export type { ChatMessageInit, ContentPartInit, ToolCallInit } from "./chat.js";

/** A message's fields where every string field also takes a JSON value (sent as its text). */
type JsonFields<T> = { [K in keyof T]?: (T[K] extends string | undefined ? string | object : T[K]) | null };

/** What makeKey takes: the key's dimensions and exactly one input. */
export interface KeyInit {
  tenant: string;
  promptVersion: string;
  /** The weights' fingerprint; empty means the pod's model (sidecar started with --model-path). */
  modelVersion?: string | null;
  adapterVersion?: string | null;
  text?: string | null;
  /** OpenAI-style messages (snake_case fields, as in the request body). */
  chat?: readonly ChatMessageInit[] | null;
  tokenIds?: readonly number[] | null;
  inputSha256?: Uint8Array | null;
  extra?: Readonly<Record<string, string>> | null;
  /** Tool definitions offered to the model (CacheKey.tools: each as its JSON text, in order,
   * key order kept, as templates render them) or a schema version name (extra.tools). */
  tools?: readonly unknown[] | string | null;
  /** "none" / "auto" / "required", or the object naming a tool (sent as its JSON text). */
  toolChoice?: string | object | null;
  parallelToolCalls?: boolean | null;
  /** "chat.completions", "completions", "embeddings" or your own name; empty is a name too. */
  endpoint?: string | null;
  /** SamplingParams fields (camelCase); a single stop string is a list of one; seed a bigint
   * or a safe integer. */
  sampling?:
    | (Omit<MessageInitShape<typeof SamplingParamsSchema>, "stop" | "seed"> & {
        stop?: string | readonly string[];
        seed?: bigint | number;
      })
    | null;
  /** ChatTemplateOptions fields; chatTemplateKwargs, documents, ... take objects as their JSON. */
  chatTemplate?: JsonFields<MessageInitShape<typeof ChatTemplateOptionsSchema>> | null;
  /** OutputOptions fields; audio, prediction, webSearchOptions take objects as their JSON. */
  output?: JsonFields<MessageInitShape<typeof OutputOptionsSchema>> | null;
}

const KEY_FIELDS = new Set([
  "tenant",
  "promptVersion",
  "modelVersion",
  "adapterVersion",
  "text",
  "chat",
  "tokenIds",
  "inputSha256",
  "extra",
  "tools",
  "toolChoice",
  "parallelToolCalls",
  "endpoint",
  "sampling",
  "chatTemplate",
  "output",
]);

const given = (v: unknown): boolean => v !== undefined && v !== null;

/** Options whose string fields take a JSON value: objects and arrays become their text,
 * a repeated field (modalities) keeps its array. */
function jsonOptions(desc: DescMessage, value: unknown, path: string): Record<string, unknown> {
  if (!isPlainObject(value)) return checkedInit(desc, value, path); // refuses it, naming path
  const fields: Record<string, unknown> = {};
  for (const [name, v] of Object.entries(value)) {
    const f = desc.field[name];
    const isText = f?.fieldKind === "scalar" && f.scalar === ScalarType.STRING;
    fields[name] = isText && v !== null && typeof v === "object" ? jsonText(v, path + name) : v;
  }
  return checkedInit(desc, fields, path);
}

function samplingInit(value: unknown): Record<string, unknown> {
  if (isPlainObject(value) && typeof value.stop === "string") {
    return checkedInit(SamplingParamsSchema, { ...value, stop: [value.stop] }, "sampling.");
  }
  return checkedInit(SamplingParamsSchema, value, "sampling.");
}

function extraEntries(value: unknown, tools: unknown): Record<string, string> {
  if (given(value) && !isPlainObject(value)) throw new Error("extra must be an object of strings");
  const extra: Record<string, string> = {};
  for (const [k, v] of Object.entries((value ?? {}) as Record<string, unknown>)) {
    extra[checkString(k, "extra key")] = checkString(v, `extra[${JSON.stringify(k)}]`);
  }
  if (typeof tools === "string") {
    if ("tools" in extra) throw new Error("give tools either as tools or as extra.tools, not both");
    extra.tools = checkString(tools, "tools");
  }
  // Entries in the order Python's deterministic encoding writes them (the digest ignores it).
  return Object.fromEntries(Object.entries(extra).sort(([a], [b]) => byCodePoint(a, b)));
}

function inputOf(init: KeyInit): MessageInitShape<typeof CacheKeySchema>["input"] {
  const inputs = [init.text, init.chat, init.tokenIds, init.inputSha256].filter(given);
  if (inputs.length !== 1) throw new Error("give exactly one of text, chat, tokenIds, inputSha256");
  if (given(init.text)) return { case: "text", value: checkString(init.text, "text") };
  if (given(init.chat)) {
    if (!Array.isArray(init.chat)) throw new Error("chat must be an array of messages");
    return { case: "chat", value: { messages: init.chat.map((m: unknown, i) => chatMessage(m, `messages[${i}]`)) } };
  }
  if (given(init.tokenIds)) {
    if (!Array.isArray(init.tokenIds)) throw new Error("tokenIds must be an array of integers");
    const ids = init.tokenIds.map((t: unknown, i) => scalar(ScalarType.UINT32, t, `tokenIds[${i}]`) as number);
    return { case: "tokenIds", value: { ids } };
  }
  return { case: "inputSha256", value: scalar(ScalarType.BYTES, init.inputSha256, "inputSha256") as Uint8Array };
}

/**
 * A CacheKey from a request's dimensions, exactly as the Python client's make_key builds it:
 * every value as given (the sidecar hashes exact strings), every field left unset stays unset
 * (never its default). Throws an Error naming the field for anything Python refuses: not
 * exactly one input, an unknown field, a wrong type, an out-of-range number, a lone surrogate.
 */
export function makeKey(init: KeyInit): CacheKey {
  if (!isPlainObject(init)) throw new Error("makeKey takes an object of key fields");
  for (const name of Object.keys(init)) {
    if (!KEY_FIELDS.has(name)) throw new Error(`${name} is not a makeKey field`);
  }
  const input = inputOf(init);
  const extra = extraEntries(init.extra, init.tools);
  let tools: string[] = [];
  if (given(init.tools) && typeof init.tools !== "string") {
    if (!Array.isArray(init.tools)) throw new Error("tools must be an array of tool definitions or a name");
    tools = init.tools.map((t: unknown, i) => jsonText(t, `tools[${i}]`));
  }
  const key: MessageInitShape<typeof CacheKeySchema> = {
    tenant: checkString(init.tenant, "tenant"),
    modelVersion: given(init.modelVersion) ? checkString(init.modelVersion, "modelVersion") : "",
    adapterVersion: given(init.adapterVersion) ? checkString(init.adapterVersion, "adapterVersion") : "",
    promptVersion: checkString(init.promptVersion, "promptVersion"),
    endpoint: given(init.endpoint) ? checkString(init.endpoint, "endpoint") : "",
    extra,
    tools,
    input,
  };
  if (given(init.toolChoice)) {
    const choice = init.toolChoice;
    key.toolChoice = typeof choice === "string" ? checkString(choice, "toolChoice") : jsonText(choice, "toolChoice");
  }
  if (given(init.parallelToolCalls)) {
    key.parallelToolCalls = scalar(ScalarType.BOOL, init.parallelToolCalls, "parallelToolCalls") as boolean;
  }
  // Set when given, even with no field in it, as Python sets it.
  if (given(init.chatTemplate)) key.chatTemplate = jsonOptions(ChatTemplateOptionsSchema, init.chatTemplate, "chatTemplate.");
  if (given(init.output)) key.output = jsonOptions(OutputOptionsSchema, init.output, "output.");
  if (given(init.sampling) && Object.keys(init.sampling as object).length > 0) {
    key.sampling = samplingInit(init.sampling);
  }
  return create(CacheKeySchema, key);
}
