// OpenAI-style chat messages -> ChatMessage inits, field for field as the Python client's
// make_key reads them (clients/python/infercache_client/keys.py), with the same refusals.

import { type MessageInitShape, ScalarType } from "@bufbuild/protobuf";

import type { ChatMessageSchema, ContentPartSchema, ToolCallSchema } from "./gen/infercache/v1/cache_pb.js";
import { checkString, isPlainObject, scalar } from "./fields.js";

type Nullable<T> = T | null | undefined;

/** A content part: text, or media by the SHA-256 of the bytes the model receives. */
export type ContentPartInit =
  | { type: "text"; text: string }
  | {
      type: "image" | "audio" | "file" | "video";
      sha256?: Uint8Array;
      detail?: Nullable<string>;
      format?: Nullable<string>;
      filename?: Nullable<string>;
    };

/** A tool call as OpenAI sends it ({id, type, function: {name, arguments}}) or flat. */
export interface ToolCallInit {
  id?: Nullable<string>;
  type?: Nullable<string>;
  function?: Nullable<{ name: string; arguments?: Nullable<string> }>;
  name?: string;
  arguments?: Nullable<string>;
}

/** An OpenAI-style chat message (snake_case, as in the request body). */
export interface ChatMessageInit {
  role: string;
  /** A string, null / absent (an assistant turn that only calls tools), or parts. */
  content?: Nullable<string | readonly ContentPartInit[]>;
  name?: Nullable<string>;
  tool_call_id?: Nullable<string>;
  tool_calls?: Nullable<readonly ToolCallInit[]>;
  reasoning_content?: Nullable<string>;
  /** vLLM's name for reasoning_content. */
  reasoning?: Nullable<string>;
}

const MESSAGE_FIELDS = new Set([
  "role",
  "content",
  "name",
  "tool_call_id",
  "tool_calls",
  "reasoning_content",
  "reasoning",
]);
const CALL_FIELDS = new Set(["id", "type", "function"]);
const FLAT_CALL_FIELDS = new Set(["id", "type", "name", "arguments"]);
const FUNCTION_FIELDS = new Set(["name", "arguments"]);
const TEXT_FIELDS = new Set(["type", "text"]);
const MEDIA_FIELDS = new Set(["type", "sha256", "detail", "format", "filename"]);
const MEDIA = new Set(["image", "audio", "file", "video"]);

function asObject(value: unknown, path: string, what: string): Record<string, unknown> {
  if (!isPlainObject(value)) throw new Error(`${path} must be ${what} (an object)`);
  return value;
}

/** Refuse a field makeKey does not key: dropping it could make two requests one key. */
function known(value: Record<string, unknown>, allowed: Set<string>, path: string): void {
  const unknown = Object.keys(value)
    .filter((k) => !allowed.has(k) && value[k] !== undefined && value[k] !== null)
    .sort();
  if (unknown[0] !== undefined) {
    const name = `${path}.${unknown[0]}`;
    // Messages are spelled as sent (snake_case), unlike the camelCase key fields.
    const snake = unknown[0].replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
    if (allowed.has(snake)) throw new Error(`${name} is not a message field (did you mean ${snake}?)`);
    throw new Error(`${name} is not a key field here: give it in extra (extra["${name}"] = its JSON text, docs/keys.md)`);
  }
}

/** A field given as null is an absent one, as in the request's JSON. */
const given = (v: unknown): boolean => v !== undefined && v !== null;

function optionalString(value: unknown, path: string): string | undefined {
  return given(value) ? checkString(value, path) : undefined;
}

function contentPart(value: unknown, path: string): MessageInitShape<typeof ContentPartSchema> {
  const part = asObject(value, path, "a content part");
  const kind = part.type;
  if (kind === "text") {
    known(part, TEXT_FIELDS, path);
    if (!("text" in part)) throw new Error(`${path}.text is required for a text part`);
    return { part: { case: "text", value: checkString(part.text, `${path}.text`) } };
  }
  if (typeof kind === "string" && MEDIA.has(kind)) {
    known(part, MEDIA_FIELDS, path);
    const media = {
      sha256: given(part.sha256) ? (scalar(ScalarType.BYTES, part.sha256, `${path}.sha256`) as Uint8Array) : undefined,
      detail: optionalString(part.detail, `${path}.detail`),
      format: optionalString(part.format, `${path}.format`),
      filename: optionalString(part.filename, `${path}.filename`),
    };
    return { part: { case: kind as "image" | "audio" | "file" | "video", value: media } };
  }
  const shown = kind === undefined ? "None" : JSON.stringify(kind);
  throw new Error(`${path}: content part type ${shown}: use text, or image/audio/file/video by sha256`);
}

function toolCall(value: unknown, path: string): MessageInitShape<typeof ToolCallSchema> {
  const call = asObject(value, path, "a tool call");
  let fn: Record<string, unknown>;
  if (given(call.function)) {
    known(call, CALL_FIELDS, path);
    fn = asObject(call.function, `${path}.function`, "a function");
    known(fn, FUNCTION_FIELDS, `${path}.function`);
  } else {
    known(call, FLAT_CALL_FIELDS, path);
    fn = call;
  }
  const namePath = fn === call ? `${path}.name` : `${path}.function.name`;
  if (!given(fn.name)) throw new Error(`${namePath} is required`);
  return {
    id: optionalString(call.id, `${path}.id`) ?? "",
    type: optionalString(call.type, `${path}.type`) ?? "function",
    name: checkString(fn.name, namePath),
    arguments: optionalString(fn.arguments, `${path}.arguments`) ?? "",
  };
}

/** One message; `path` is its place in errors ("messages[2]"). */
export function chatMessage(value: unknown, path: string): MessageInitShape<typeof ChatMessageSchema> {
  const m = asObject(value, path, "a chat message");
  known(m, MESSAGE_FIELDS, path);
  if (!given(m.role)) throw new Error(`${path}.role is required`);
  const msg: MessageInitShape<typeof ChatMessageSchema> = { role: checkString(m.role, `${path}.role`) };
  const content = m.content;
  if (typeof content === "string") msg.content = checkString(content, `${path}.content`);
  else if (!given(content)) msg.nullContent = true; // null or absent: templates tell it from ""
  else if (Array.isArray(content)) msg.parts = content.map((p: unknown, j) => contentPart(p, `${path}.content[${j}]`));
  else throw new Error(`${path}.content must be a string, null or an array of parts`);
  if (given(m.reasoning)) {
    if (given(m.reasoning_content)) throw new Error(`${path}: give reasoning_content or reasoning, not both`);
    msg.reasoningContent = checkString(m.reasoning, `${path}.reasoning`);
  }
  // An empty name or tool_call_id is none (proto3 strings); an empty reasoning is a value.
  msg.name = optionalString(m.name, `${path}.name`) ?? "";
  msg.toolCallId = optionalString(m.tool_call_id, `${path}.tool_call_id`) ?? "";
  const reasoning = optionalString(m.reasoning_content, `${path}.reasoning_content`);
  if (reasoning !== undefined) msg.reasoningContent = reasoning;
  if (given(m.tool_calls)) {
    if (!Array.isArray(m.tool_calls)) throw new Error(`${path}.tool_calls must be an array`);
    msg.toolCalls = m.tool_calls.map((c: unknown, j) => toolCall(c, `${path}.tool_calls[${j}]`));
  }
  return msg;
}
