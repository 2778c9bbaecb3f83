import { Readable } from "node:stream";
import { S3Client, type S3ClientConfig } from "@aws-sdk/client-s3";
import { mulberry32 } from "@fenced/servers/random";
import { applyCall, type Answer, type Decoded } from "./memory-ops-test-support.js";
import { escapeXml, MemoryBucket, type QuirkProfile, type Stored } from "./memory-bucket-test-support.js";

export { awsProfile, radosgwProfile, type QuirkProfile } from "./memory-bucket-test-support.js";

/**
 * An in-memory S3 server for tests, as the S3Client's HTTP handler: below every middleware of the
 * SDK, so signing, the store's gates, XML error parsing and retries all run unchanged over it. It
 * answers HTTP as S3 does (statuses, quoted ETags, XML bodies), with the differences between
 * backends in a QuirkProfile, and applies each request when its Scheduler says: a test decides the
 * order in which concurrent requests land, delays answers, and loses answers of applied requests.
 */

/** One request as the server received it. */
export interface MemoryCall {
  /** In order of arrival, from 1. */
  readonly id: number;
  /** The label of the client that sent it (one client per simulated process). */
  readonly client: string;
  /** The S3 operation, as its command is named without "Command": "PutObject", "GetObject", … */
  readonly operation: string;
  readonly bucket: string;
  readonly key: string | undefined;
}

/** Decides when each request is applied, and whether its answer arrives. */
export interface Scheduler {
  /** Resolves when the request may be applied (the server's order is the order these resolve in). */
  turn(call: MemoryCall): Promise<void>;
  /** After it was applied: resolves false to lose its answer (the client sees a reset connection). Default: delivered at once. */
  deliver?(call: MemoryCall, status: number): Promise<boolean>;
  /** Chooses one of `n` answers a backend may give (a race loser's, QuirkProfile.raceLoser). Default: the first. */
  choose?(call: MemoryCall, n: number): number;
}

/** Every request applied in order of arrival, with no delay and every answer delivered. */
const inOrder: Scheduler = { turn: () => Promise.resolve() };

/** A request the server applied, and how it answered. */
export interface Applied {
  readonly call: MemoryCall;
  readonly status: number;
  /** The object a successful write left at its key (undefined for every other request). */
  readonly wrote: Stored | undefined;
  /** Whether its answer was lost (or its caller aborted before it arrived). */
  lost: boolean;
}

interface WireRequest {
  readonly method: string;
  readonly path: string;
  readonly query?: Record<string, string | readonly string[] | null>;
  readonly headers: Record<string, string>;
  readonly body?: unknown;
}

export class MemoryS3 {
  private readonly buckets = new Map<string, MemoryBucket>();
  /** Every request applied, in the order it was. */
  readonly log: Applied[] = [];
  private calls = 0;

  constructor(
    readonly profile: QuirkProfile,
    readonly scheduler: Scheduler = inOrder,
  ) {}

  createBucket(name = `bucket-${this.buckets.size + 1}`): string {
    this.buckets.set(name, new MemoryBucket(name));
    return name;
  }

  /** The object at a key now, or undefined. */
  object(bucket: string, key: string): Stored | undefined {
    return this.buckets.get(bucket)?.objects.get(key);
  }

  /** Keys of the objects in a bucket now, in S3's order. */
  keys(bucket: string, prefix = ""): string[] {
    return this.buckets.get(bucket)?.keys(prefix, undefined) ?? [];
  }

  /**
   * A real S3Client whose requests this server answers; `label` names them in MemoryCall.client.
   * maxAttempts as the SDK's (default 3): 1 shows every answer as it came, none retried; a
   * retryMode or a retryStrategy of a caller's own replaces the SDK's standard one.
   */
  client(label = "client", options: Pick<S3ClientConfig, "maxAttempts" | "retryStrategy" | "retryMode"> = {}): S3Client {
    const requestHandler = {
      handle: (request: WireRequest, options?: { abortSignal?: AbortSignal }) => this.handle(label, request, options?.abortSignal),
      updateHttpClientConfig: () => undefined,
      httpHandlerConfigs: () => ({}),
    };
    return new S3Client({
      region: "us-east-1",
      endpoint: "http://memory.s3.invalid",
      forcePathStyle: true,
      credentials: { accessKeyId: "memory", secretAccessKey: "memory" },
      // As the radosgw tests' clients (packages/servers): checksums only where an operation requires them.
      requestChecksumCalculation: "WHEN_REQUIRED",
      responseChecksumValidation: "WHEN_REQUIRED",
      requestHandler,
      ...options,
    });
  }

  private async handle(label: string, request: WireRequest, signal: AbortSignal | undefined): Promise<{ response: unknown }> {
    // As the SDK's Node handler: an aborted request is never sent, and an abort ends the wait for its answer.
    if (signal?.aborted === true) throw abortError(signal);
    const decoded = decode(request, await bodyBytes(request.body));
    const call: MemoryCall = { id: ++this.calls, client: label, operation: decoded.operation, bucket: decoded.bucket, key: decoded.key };
    const bucket = this.buckets.get(decoded.bucket);
    const atArrival = decoded.key === undefined ? undefined : bucket?.objects.get(decoded.key);
    await untilAborted(this.scheduler.turn(call), signal);
    const answer: Answer =
      bucket === undefined
        ? { status: 404, code: "NoSuchBucket" }
        : applyCall(bucket, decoded, { profile: this.profile, atArrival, choose: (n) => this.scheduler.choose?.(call, n) ?? 0 });
    const applied: Applied = { call, status: answer.status, wrote: answer.wrote, lost: false };
    this.log.push(applied);
    try {
      const delivered = await untilAborted(this.scheduler.deliver?.(call, answer.status) ?? Promise.resolve(true), signal);
      if (!delivered) throw Object.assign(new Error("socket hang up"), { code: "ECONNRESET" });
    } catch (err) {
      applied.lost = true;
      throw err;
    }
    return { response: httpResponse(answer, decoded) };
  }
}

/** One turn of the event loop. */
export const tick = (): Promise<void> => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * Applies the requests waiting in a random order (one per turn of the event loop, among those that
 * have arrived), delays each answer by a few turns, and loses the answers of some applied requests:
 * the "applied, answer lost" fault (the SDK retries what it may, as over a reset connection).
 */
export class SeededScheduler implements Scheduler {
  private readonly waiting: (() => void)[] = [];
  private pumping = false;

  private readonly next: () => number;

  constructor(
    seed: number,
    /** The chance that an applied request's answer is lost (may be changed between requests). */
    public loss = 0,
  ) {
    this.next = mulberry32(seed);
  }

  turn(): Promise<void> {
    return new Promise((go) => {
      this.waiting.push(go);
      void this.pump();
    });
  }

  private async pump(): Promise<void> {
    if (this.pumping) return;
    this.pumping = true;
    while (this.waiting.length > 0) {
      await tick();
      const [go] = this.waiting.splice(Math.floor(this.next() * this.waiting.length), 1);
      go?.();
    }
    this.pumping = false;
  }

  async deliver(): Promise<boolean> {
    for (let delay = Math.floor(this.next() * 3); delay > 0; delay--) await tick();
    return !(this.next() < this.loss);
  }

  choose(_call: MemoryCall, n: number): number {
    return Math.floor(this.next() * n);
  }
}

/** A client of a fresh in-memory server with the given buckets ("bucket" unless named). */
export function memoryS3Client(options: { profile: QuirkProfile; scheduler?: Scheduler; buckets?: readonly string[] }): S3Client {
  const server = new MemoryS3(options.profile, options.scheduler);
  for (const name of options.buckets ?? ["bucket"]) server.createBucket(name);
  return server.client();
}

/** The S3 operation a request is, from its method, its path and its query, as S3 routes it. */
function decode(request: WireRequest, body: Buffer): Decoded {
  const [bucketPart = "", ...keyParts] = request.path.replace(/^\//, "").split("/");
  const keyText = keyParts.join("/");
  const key = keyText === "" ? undefined : decodeURIComponent(keyText);
  const query: Record<string, string> = {};
  for (const [name, value] of Object.entries(request.query ?? {})) query[name] = typeof value === "string" ? value : (value?.[0] ?? "");
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(request.headers)) headers[name.toLowerCase()] = value;
  const has = (name: string): boolean => name in query;
  const copy = "x-amz-copy-source" in headers;
  const operation = ((): string => {
    if (key === undefined) {
      if (request.method === "GET") return has("uploads") ? "ListMultipartUploads" : "ListObjectsV2";
      return request.method === "POST" && has("delete") ? "DeleteObjects" : `${request.method} bucket`;
    }
    if (request.method === "PUT") return has("uploadId") ? (copy ? "UploadPartCopy" : "UploadPart") : copy ? "CopyObject" : "PutObject";
    if (request.method === "POST") return has("uploads") ? "CreateMultipartUpload" : "CompleteMultipartUpload";
    if (request.method === "DELETE") return has("uploadId") ? "AbortMultipartUpload" : "DeleteObject";
    if (request.method === "HEAD") return "HeadObject";
    return request.method === "GET" ? "GetObject" : `${request.method} object`;
  })();
  return { operation, bucket: decodeURIComponent(bucketPart), key, query, headers, body };
}

async function bodyBytes(body: unknown): Promise<Buffer> {
  if (body === undefined || body === null) return Buffer.alloc(0);
  if (typeof body === "string") return Buffer.from(body, "utf8");
  if (body instanceof Uint8Array) return Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  if (body instanceof Readable) {
    const chunks: Buffer[] = [];
    for await (const chunk of body) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as Uint8Array));
    return Buffer.concat(chunks);
  }
  throw new Error(`the in-memory S3 server cannot read a request body of type ${typeof body}`);
}

function httpResponse(answer: Answer, decoded: Decoded): { statusCode: number; headers: Record<string, string>; body: Readable } {
  let body = answer.body ?? Buffer.alloc(0);
  // Every answer carries the server's clock, as S3's do (RFC 9110: whole seconds); skewDates()
  // (wire-test-support.ts) moves it, on this server's answers as on radosgw's.
  const headers: Record<string, string> = { ...answer.headers, date: new Date().toUTCString() };
  if (answer.code !== undefined) {
    const resource = escapeXml(`/${decoded.bucket}/${decoded.key ?? ""}`);
    const xml = `<?xml version="1.0" encoding="UTF-8"?><Error><Code>${answer.code}</Code><Message></Message><Resource>${resource}</Resource><RequestId>memory</RequestId></Error>`;
    body = Buffer.from(xml, "utf8");
    headers["content-type"] = "application/xml";
  }
  headers["content-length"] = String(body.length);
  return { statusCode: answer.status, headers, body: Readable.from(body.length === 0 ? [] : [body]) };
}

/** The error the SDK's Node handler rejects with when the request's signal aborts. */
function abortError(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  const error = new Error(typeof reason === "string" ? reason : "Request aborted");
  error.name = "AbortError";
  if (reason instanceof Error) error.cause = reason;
  return error;
}

function untilAborted<T>(work: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return work;
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(abortError(signal));
    if (signal.aborted) return onAbort();
    signal.addEventListener("abort", onAbort, { once: true });
    work.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}
