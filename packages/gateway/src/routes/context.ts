import { isUtf8 } from "node:buffer";
import { parse as parseContentType } from "content-type";
import type { Request, Response } from "express";
import type { Level, Logger } from "pino";
import { z } from "zod";
import type { WriteAnswer } from "../schemas/answers.js";
import type { RecordWritesAnswer } from "../schemas/record-writes.js";
import type { ApiKeys } from "../auth/api-keys.js";
import type { FenceCredentials } from "../auth/credentials.js";
import type { GatewayMetrics, WriteOp } from "../ops/metrics.js";
import type { Family } from "../stores/registration.js";
import type { ProblemKind } from "../problems/kinds.js";
import { HttpProblem } from "../problems/problem.js";
import { parseJsonText } from "../http/json-text.js";
import { readWhole } from "../http/request-body.js";
import type { RequestLocals } from "../http/request-scope.js";

export interface Limits {
  /** Largest JSON record body, in bytes (413 above). */
  readonly recordBytes: number;
  /** Largest object body, in bytes (413 above: at once when Content-Length says so, else when the stream passes it). */
  readonly objectBytes: number;
  /** Longest lease a client may ask for. */
  readonly maxTtlMs: number;
  /** Object bodies of known length up to this size are read into memory and stored inline in the manifest. */
  readonly inlineBytes: number;
}

/** GatewayOptions.limits with their defaults (the API document states the same numbers). */
export const limitsSchema = z.strictObject({
  recordBytes: z
    .number()
    .int()
    .min(1)
    .max(64 * 1024 * 1024)
    .default(1024 * 1024),
  objectBytes: z
    .number()
    .int()
    .min(0)
    .max(Number.MAX_SAFE_INTEGER)
    .default(5 * 1024 ** 3),
  maxTtlMs: z
    .number()
    .int()
    .min(1)
    .max(2 ** 31 - 1)
    .default(3_600_000),
});

/** What every route module gets from createGateway. */
export interface RouteContext {
  readonly auth: ApiKeys;
  readonly metrics: GatewayMetrics;
  /** Inside a request, that request's logger (a child carrying its requestId, made on first use). */
  readonly logger: Logger;
  /**
   * Whether a line at `level` is written. Asked of the gateway's logger, whose level every request's
   * logger takes: asking makes no request logger, so a request that logs nothing allocates none. (A
   * logger given whose children change their own level, through pino's `onChild`, is asked at its own.)
   */
  logs(level: Level): boolean;
  readonly limits: Limits;
  /** Fence credentials: minted for granted leases, required on writes from keys that are not trusted lock clients. */
  readonly credentials: FenceCredentials | undefined;
}

/** res.locals fields the request accounting (outcomes.ts' account) reads once the response is over. */
export interface Accounting extends RequestLocals {
  write?: { readonly store: Family; readonly op: WriteOp };
  /** Set the moment the store accepted the write: a client that hangs up afterwards does not undo it. */
  accepted?: boolean;
  principal?: string;
  problem?: ProblemKind;
  /** What the request failed with, its kind and detail: logged once, with the request's line. */
  failure?: { readonly err: unknown; readonly kind: ProblemKind; readonly detail: string | undefined };
}

export function accounting(res: Response): Accounting {
  return res.locals as Accounting;
}

export function markWrite(res: Response, store: Family, op: WriteOp): void {
  accounting(res).write = { store, op };
}

export function markAccepted(res: Response): void {
  accounting(res).accepted = true;
}

/** Whether `bytes` start with a UTF-8 byte order mark: JSON may (RFC 8259 §8.1 lets a parser ignore it). */
const startsWithBom = (bytes: Buffer): boolean => bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf;

/**
 * A JSON body reader for one route: media type checked first (415), then that there is a body (400),
 * that it is not compressed and is UTF-8 (415) — all before "100 Continue" — then the size limit
 * (413, also when Content-Length alone announces too much: http/request-body.ts, readWhole), then
 * the bytes (400 unless well-formed UTF-8 holding a value), then the syntax (400) and the numbers
 * (400 for one a double would change: http/json-text.ts). Compressed bodies are refused rather than
 * inflated: the limit must bound what the gateway holds, not what it received.
 */
export function jsonBody(limitBytes: number): (req: Request, res: Response) => Promise<unknown> {
  return async (req, res) => {
    const type = req.headers["content-type"];
    const media = type === undefined ? undefined : parseContentType(type);
    if (media?.type !== "application/json")
      throw new HttpProblem("mediaType", `body: expected Content-Type application/json, got ${JSON.stringify(type ?? null)}`);
    if (req.headers["content-length"] === undefined && req.headers["transfer-encoding"] === undefined)
      throw new HttpProblem("invalid", "body: a JSON value is required");
    const given = req.headers["content-encoding"];
    const coding = given === undefined || given === "" ? "identity" : given.toLowerCase();
    if (coding !== "identity") throw new HttpProblem("mediaType", `body: not accepted with Content-Encoding ${JSON.stringify(coding)}`);
    // JSON in well-formed UTF-8 only (RFC 8259 §8.1): no charset parameter, or utf-8.
    const charset = (media.parameters.charset ?? "").toLowerCase() || "utf-8";
    if (charset !== "utf-8") throw new HttpProblem("mediaType", `body: JSON must be UTF-8, got charset ${JSON.stringify(charset)}`);
    const bytes = await readWhole(req, res, limitBytes);
    const start = startsWithBom(bytes) ? 3 : 0;
    // An empty body, or one of only a byte order mark, is a client mistake, never a value to store.
    if (bytes.length === start) throw new HttpProblem("invalid", "body: a JSON value is required");
    // Decoding would put U+FFFD in place of every ill-formed sequence: a value the client never sent.
    if (!isUtf8(bytes)) throw new HttpProblem("invalid", "body: not well-formed UTF-8");
    try {
      return parseJsonText(bytes.toString("utf8", start));
    } catch (err) {
      if (err instanceof HttpProblem) throw err;
      throw new HttpProblem("invalid", `body: not JSON (${err instanceof Error ? err.message : String(err)})`);
    }
  };
}

/** A JSON answer to a write, in one piece: res.json's negotiation and freshness checks serve GETs, not writes. */
export function sendJson(res: Response, status: number, body: WriteAnswer | RecordWritesAnswer): void {
  const text = JSON.stringify(body);
  res.statusCode = status;
  res.setHeader("Content-Type", "application/json; charset=utf-8");
  res.setHeader("Content-Length", Buffer.byteLength(text));
  res.end(text);
}

type Handler = (req: Request, res: Response) => Promise<void>;

/**
 * The method dispatch of a /v1/records or /v1/objects key: HEAD is served by the GET handler (Node
 * sends no body for HEAD), and any method other than GET/HEAD/PUT/DELETE is a 405 with Allow.
 */
export function keyMethods(handlers: { get: Handler; put: Handler; remove: Handler }): Handler {
  return async (req, res) => {
    switch (req.method) {
      case "GET":
      case "HEAD":
        return handlers.get(req, res);
      case "PUT":
        return handlers.put(req, res);
      case "DELETE":
        return handlers.remove(req, res);
      default:
        methodNotAllowed(res, "GET, HEAD, PUT, DELETE");
    }
  };
}

/** 405 with Allow, for a method the route does not serve. */
export function methodNotAllowed(res: Response, allow: string): never {
  res.setHeader("Allow", allow);
  throw new HttpProblem("method", `this resource allows ${allow}`);
}
