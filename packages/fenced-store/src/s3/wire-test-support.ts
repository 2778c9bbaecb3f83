import { randomBytes } from "node:crypto";
import { Readable } from "node:stream";
import { listKeys } from "@fenced/servers/s3-keys";
import { GetObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import { decodeManifest, type ManifestHeader } from "../cas/manifest.js";

/**
 * Tools for the S3 tests: they act on a real client's middleware stack, so the store under test
 * runs unmodified against a real server (or the in-memory one, memory-s3-test-support.ts) while a
 * test holds, fails or watches individual requests. Nothing here starts a server or a process: the
 * fast tier (vitest.unit.config.ts) runs the tests that use only these. radosgw's own tools are in
 * test-support.ts.
 */

export interface RequestInfo {
  readonly command: string;
  readonly key: string | undefined;
  readonly input: Record<string, unknown>;
}

type Around = (info: RequestInfo, send: () => Promise<unknown>) => Promise<unknown>;

/** Wraps every request of the client; `around` decides when (and whether) it is sent. */
export function intercept(client: S3Client, around: Around): () => void {
  const name = `intercept-${randomBytes(4).toString("hex")}`;
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const input = args.input as Record<string, unknown>;
      const info = { command: context.commandName ?? "", key: typeof input.Key === "string" ? input.Key : undefined, input };
      return (await around(info, () => next(args))) as Awaited<ReturnType<typeof next>>;
    },
    { step: "initialize", name },
  );
  return () => {
    client.middlewareStack.remove(name);
  };
}

export function isManifestPut(info: RequestInfo): boolean {
  return info.command === "PutObjectCommand" && (info.key?.includes("/manifests/") ?? false);
}

export interface Gate {
  /** Resolves when the first matching request has arrived and is being held. */
  readonly reached: Promise<void>;
  /** Lets the held request go (and every later one). */
  release(): void;
}

/** Holds the first request that matches until release(): "the process pauses right here". */
export function holdFirst(client: S3Client, match: (info: RequestInfo) => boolean): Gate {
  let arrived!: () => void;
  let open!: () => void;
  const reached = new Promise<void>((r) => (arrived = r));
  const released = new Promise<void>((r) => (open = r));
  let held = false;
  intercept(client, async (info, send) => {
    if (!held && match(info)) {
      held = true;
      arrived();
      await released;
    }
    return send();
  });
  return { reached, release: () => open() };
}

/** An error shaped like the SDK's for a given HTTP status (or, without one, like a lost connection). */
export function fakeError(status: number | undefined, name: string): Error {
  const err = new Error(`injected ${name}`);
  err.name = name;
  if (status !== undefined) Object.assign(err, { $metadata: { httpStatusCode: status }, Code: name });
  return err;
}

/** Strips conditional headers on the wire, like an emulator that accepts and ignores them. */
export function ignoreConditions(client: S3Client): void {
  client.middlewareStack.add(
    (next) => async (args) => {
      const headers = (args.request as { headers?: Record<string, string> }).headers ?? {};
      for (const h of Object.keys(headers)) if (/^if-(none-)?match$/i.test(h)) delete headers[h];
      return next(args);
    },
    { step: "build", name: `ignore-conditions-${randomBytes(4).toString("hex")}` },
  );
}

/** Records the header of every manifest PUT the server accepted, in the order the responses came. */
export function auditManifests(client: S3Client): ManifestHeader[] {
  const accepted: ManifestHeader[] = [];
  intercept(client, async (info, send) => {
    const out = await send();
    if (isManifestPut(info) && Buffer.isBuffer(info.input.Body)) {
      const key = (info.key ?? "").replace(/^.*?\/manifests\//, "");
      accepted.push(decodeManifest(key, info.input.Body).header);
    }
    return out;
  });
  return accepted;
}

/** Every key in the bucket under a prefix. */
export { listKeys };

/** Every object under a prefix with its bytes: "nothing changed" is this, equal before and after. */
export async function contents(client: S3Client, bucket: string, prefix = ""): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const key of await listKeys(client, bucket, prefix)) {
    const res = await client.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
    out[key] = Buffer.from((await res.Body?.transformToByteArray()) ?? []).toString("utf8");
  }
  return out;
}

/** Resolves when the first response to a matching request has come back (the request completed). */
export function answered(client: S3Client, match: (info: RequestInfo) => boolean): Promise<void> {
  let done!: () => void;
  const seen = new Promise<void>((r) => (done = r));
  intercept(client, async (info, send) => {
    const out = await send();
    if (match(info)) done();
    return out;
  });
  return seen;
}

export function isFenceRead(info: RequestInfo): boolean {
  return info.command === "GetObjectCommand" && (info.key?.includes("/fences/") ?? false);
}

/** A request that writes a data object's bytes (one PUT, or a multipart upload's first request). */
export function isDataUpload(info: RequestInfo): boolean {
  const data = info.key?.includes("/data/") ?? false;
  return (
    data && (info.command === "PutObjectCommand" || info.command === "CreateMultipartUploadCommand" || info.command === "UploadPartCommand")
  );
}

/** A request as it goes on the wire: its method and which of the store's folders it is for. */
export interface WireRequest {
  readonly method: string;
  readonly kind: "manifests" | "fences" | "data" | "other";
}

/**
 * Calls `seen` for every request the moment it is handed to the client's HTTP handler: what has gone
 * on the wire, unlike intercept(), which sees a request when it enters the SDK (it may still be held).
 */
export function onWire(client: S3Client, seen: (request: WireRequest) => void): void {
  aroundWire(client, (request, send) => {
    const kind = /\/(manifests|fences|data)\//.exec(request.path)?.[1];
    seen({ method: request.method, kind: kind === "manifests" || kind === "fences" || kind === "data" ? kind : "other" });
    return send();
  });
}

/** A request as the HTTP handler is given it: enough to tell which of the store's objects it is for. */
export interface WireCall {
  readonly method: string;
  readonly path: string;
}

/** An HTTP answer made up by a test, in place of the server's. */
export interface FakeAnswer {
  readonly status: number;
  /** The S3 error code the body carries (e.g. "SlowDown"). */
  readonly code: string;
}

/**
 * Answers requests at the HTTP handler, inside the SDK's retry loop: `answer` may return a made-up
 * answer (the request never reaches the server) or undefined to send it. A made-up error answer is
 * seen by the SDK exactly as the server's would be, retries included; it carries a `Date`, as a
 * server's does, on the clock skewDates() set for this client (the real one if none).
 */
export function answerOnWire(client: S3Client, answer: (call: WireCall) => Promise<FakeAnswer | undefined>): void {
  aroundWire(client, async (request, send) => {
    const fake = await answer(request);
    if (fake === undefined) return send();
    const body = `<?xml version="1.0" encoding="UTF-8"?><Error><Code>${fake.code}</Code><Message>injected</Message></Error>`;
    const headers = {
      "content-type": "application/xml",
      "content-length": String(Buffer.byteLength(body)),
      date: httpDate(skews.get(client) ?? 0),
    };
    return { response: { statusCode: fake.status, reason: fake.code, headers, body: Readable.from([Buffer.from(body)]) } };
  });
}

/** The skew skewDates() set per client, which answerOnWire's made-up answers carry too. */
const skews = new WeakMap<S3Client, number>();

/** An HTTP `Date` (whole seconds) on a clock `skewMs` ahead of this process's (behind, if negative). */
function httpDate(skewMs: number): string {
  return new Date(Date.now() + skewMs).toUTCString();
}

/**
 * Every answer this client gets says, in its `Date` header, that the server's clock is `skewMs`
 * ahead of the client's (behind, if negative): the answers of the server, rewritten at the HTTP
 * handler, and the ones answerOnWire makes up. The SDK's SigV4 signer reads that header: it moves the
 * client's clock offset to it after every answer, and marks an error answer `clockSkewCorrected`
 * (which its retry strategy retries) when the skew is 4 minutes or more and the offset moved.
 * Install it before answerOnWire, so that it rewrites the server's answers only.
 */
export function skewDates(client: S3Client, skewMs: number): void {
  skews.set(client, skewMs);
  aroundWire(client, async (_call, send) => {
    const answer = (await send()) as { response: { headers: Record<string, string> } };
    answer.response.headers.date = httpDate(skewMs);
    return answer;
  });
}

export function isFenceWrite(info: RequestInfo): boolean {
  return info.command === "PutObjectCommand" && (info.key?.includes("/fences/") ?? false);
}

/** An error shaped like Node's for a failed connection (ECONNREFUSED: nothing was sent; ECONNRESET: the connection dropped). */
export function networkError(code: "ECONNREFUSED" | "ECONNRESET"): Error {
  return Object.assign(new Error(`injected ${code}`), { code });
}

type AroundWire = (call: WireCall, send: () => Promise<unknown>) => Promise<unknown>;

/** Each client's arounds, in the order installed; the last installed runs outermost, as wrappers of a handler would. */
const arounds = new WeakMap<S3Client, AroundWire[]>();

/**
 * `around` sees each request of the client as it is handed to the HTTP handler — inside the SDK's
 * retry loop and every middleware of the SDK and of the store but one: the store's choice of
 * connections for a conditional PUT (sent-once.ts, fencedOwnSockets), the innermost — and decides
 * whether (and when) it is sent; it returns the HTTP answer (`{ response }`), the server's or one it
 * made up. So nothing of the store sees an answer before `around` has returned it. Installed as the
 * innermost middleware of the client's own stack (a command's own come inside it at the same
 * priority), so that a request the store sends over connections of its own is seen too.
 */
export function aroundWire(client: S3Client, around: AroundWire): void {
  const installed = arounds.get(client);
  if (installed !== undefined) {
    installed.push(around);
    return;
  }
  const chain: AroundWire[] = [around];
  arounds.set(client, chain);
  client.middlewareStack.add(
    (next) => (args) => {
      const request = args.request as WireCall;
      const run = (i: number): Promise<unknown> => {
        const outer = chain[i];
        return outer === undefined ? next(args) : outer(request, () => run(i - 1));
      };
      return run(chain.length - 1) as ReturnType<typeof next>;
    },
    { step: "deserialize", priority: "low", name: `around-wire-${randomBytes(4).toString("hex")}` },
  );
}
