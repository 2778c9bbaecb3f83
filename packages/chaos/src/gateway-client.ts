import { Agent, request } from "node:http";
import { StaleTokenError, VersionMismatchError } from "@fenced/store";

/**
 * What a chaos worker sends a fenced gateway (README "HTTP gateway"), over keep-alive HTTP/1.1, and
 * how each answer maps to an outcome. Answers are told apart by status and problem `type`, never by
 * their text. A write's refusals come back as the store's own error classes, so that a worker
 * classifies a write the same way whether it went through the gateway or not:
 *
 * - 200: written;
 * - 409 `/problems/stale-token`: StaleTokenError; 412: VersionMismatchError (nothing written);
 * - any other 4xx: GatewayRefusedError (the gateway refused the request before the store wrote anything);
 * - 5xx: GatewayFailedError (a backend failed or gave up mid-request: the write may have landed);
 * - a broken connection or no answer in time: the socket's own error (the write may have landed).
 */

/** Problem types a worker branches on (packages/gateway/src/problems/kinds.ts). */
const STALE_TOKEN = "/problems/stale-token";
const LOCK_HELD = "/problems/lock-held";

/** The gateway refused the request (a 4xx other than a stale token or a version mismatch): nothing was written. */
export class GatewayRefusedError extends Error {
  override readonly name = "GatewayRefusedError";
  constructor(
    readonly status: number,
    readonly type: string | undefined,
    detail: string,
  ) {
    super(`gateway refused (${status}${type === undefined ? "" : ` ${type}`}): ${detail}`);
  }
}

/** The gateway answered 5xx: a backend failed or gave up while the request ran; a write's outcome is unknown. */
export class GatewayFailedError extends Error {
  override readonly name = "GatewayFailedError";
  constructor(
    readonly status: number,
    readonly type: string | undefined,
    detail: string,
  ) {
    super(`gateway failed (${status}${type === undefined ? "" : ` ${type}`}): ${detail}`);
  }
}

/** No lease this time: another lease holds the resource (409 lock-held) or too few lock nodes answered (503). Worth retrying. */
export class LockBusyError extends Error {
  override readonly name = "LockBusyError";
  constructor(
    readonly status: number,
    detail: string,
  ) {
    super(`no lease (${status}): ${detail}`);
  }
}

/**
 * `register: true` and a store had already accepted a higher token (or the same token from another
 * holder): the lock granted a lease with `token`, and the gateway released it at once. Its holder id
 * is not disclosed.
 */
export class RegistrationRefusedError extends Error {
  override readonly name = "RegistrationRefusedError";
  constructor(
    readonly resource: string,
    readonly token: bigint,
    readonly highest: bigint,
    detail: string,
  ) {
    super(`registration refused: ${detail}`);
  }
}

/** One resource of a gateway lease: its token, and the credential of the writes under it. */
interface GatewayFence {
  readonly resource: string;
  readonly token: bigint;
  readonly fence: string;
}

export interface GatewayLease {
  readonly resource: string;
  readonly token: bigint;
  /** Every resource of the lease, in the order asked for (one entry for a lease of one resource). */
  readonly fences: readonly GatewayFence[];
  /** The lease's public holder id. */
  readonly holder: string;
  /** The signed fence credential every write of this lease presents (Fencing-Credential). */
  readonly fence: string;
  /** A capability for extending and releasing the lease; it goes in request bodies only. */
  readonly leaseId: string;
  readonly validUntil: number;
}

/** /v1/records holds JSON in PostgreSQL, /v1/objects bytes in S3. */
export type GatewayArea = "records" | "objects";

interface Answer {
  readonly status: number;
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  readonly body: Buffer;
}

interface Problem {
  readonly type?: unknown;
  readonly detail?: unknown;
  readonly [field: string]: unknown;
}

function problemOf(answer: Answer): Problem {
  try {
    const parsed: unknown = JSON.parse(answer.body.toString("utf8"));
    return typeof parsed === "object" && parsed !== null ? (parsed as Problem) : {};
  } catch {
    return {};
  }
}

const text = (value: unknown): string | undefined => (typeof value === "string" ? value : undefined);
const TOKEN = /^(0|[1-9][0-9]{0,18})$/;
const token = (value: unknown): bigint | undefined => (typeof value === "string" && TOKEN.test(value) ? BigInt(value) : undefined);

/** A failed answer as the error a worker classifies: refused (4xx, nothing written) or failed (5xx, unknown). */
function unexpected(answer: Answer, what: string): Error {
  const problem = problemOf(answer);
  const detail = text(problem.detail) ?? `${what}: unexpected answer`;
  return answer.status >= 500
    ? new GatewayFailedError(answer.status, text(problem.type), detail)
    : new GatewayRefusedError(answer.status, text(problem.type), detail);
}

/** One record of POST /v1/records. */
export interface RecordWrite {
  readonly key: string;
  readonly resource: string;
  readonly value: unknown;
  readonly ifVersion?: string;
}

/** A write's refusal as the store's own error (stale token, version), or a refused/failed answer. */
function writeRefusal(answer: Answer, what: string, key: string, ifVersion: string | undefined): Error {
  const problem = problemOf(answer);
  if (answer.status === 409 && problem.type === STALE_TOKEN) {
    const [t, highest, resource] = [token(problem.token), token(problem.highest), text(problem.resource)];
    if (t !== undefined && highest !== undefined && resource !== undefined) return new StaleTokenError(resource, t, highest);
  }
  if (answer.status === 412) return new VersionMismatchError(text(problem.key) ?? key, ifVersion ?? "", text(problem.actual));
  return unexpected(answer, what);
}

/** A lease answer's `fences`, or undefined if it has none that reads as one. */
function fencesOf(value: unknown): GatewayFence[] | undefined {
  if (!Array.isArray(value) || value.length === 0) return undefined;
  const fences: GatewayFence[] = [];
  for (const entry of value as unknown[]) {
    const e = (typeof entry === "object" && entry !== null ? entry : {}) as Problem;
    const [resource, t, fence] = [text(e.resource), token(e.token), text(e.fence)];
    if (resource === undefined || t === undefined || fence === undefined) return undefined;
    fences.push({ resource, token: t, fence });
  }
  return fences;
}

/** A key in a path: each segment percent-encoded, '/' kept (the gateway reads both alike). */
function keyPath(area: GatewayArea, key: string): string {
  return `/v1/${area}/${key.split("/").map(encodeURIComponent).join("/")}`;
}

/** The version an ETag names: `"7"` → `7`. */
function versionOf(etag: string | string[] | undefined): string {
  const m = typeof etag === "string" ? /^"([^"]+)"$/.exec(etag) : null;
  if (m?.[1] === undefined) throw new GatewayFailedError(200, undefined, `the answer carries no usable ETag (${String(etag)})`);
  return m[1];
}

export class GatewayClient {
  private readonly agent = new Agent({ keepAlive: true, maxSockets: 2 });
  private readonly authorization: string;

  /**
   * @param port where the gateway (or a proxy in front of it) listens on 127.0.0.1
   * @param timeoutMs a request that has not been answered by then fails with a socket error (for a write: outcome unknown)
   */
  constructor(
    private readonly port: number,
    apiKey: string,
    private readonly timeoutMs: number,
  ) {
    this.authorization = `Bearer ${apiKey}`;
  }

  /**
   * POST /v1/leases, of one resource or (an array) of several at once. Throws LockBusyError (409
   * lock-held, 503), RegistrationRefusedError (409 stale-token) or a refused/failed answer.
   * `signal` abandons the request (a lease it may still grant expires by its TTL).
   */
  async acquire(asked: string | readonly string[], ttlMs: number, register: boolean, signal?: AbortSignal): Promise<GatewayLease> {
    const resource = typeof asked === "string" ? asked : (asked[0] ?? "");
    const what = typeof asked === "string" ? { resource } : { resources: asked };
    const answer = await this.send(
      "POST",
      "/v1/leases",
      { "content-type": "application/json" },
      Buffer.from(JSON.stringify({ ...what, ttlMs, register })),
      signal,
    );
    if (answer.status === 201) {
      const body = problemOf(answer);
      const t = token(body.token);
      const [holder, fence, leaseId, owner] = [text(body.holder), text(body.fence), text(body.leaseId), text(body.resource)];
      if (
        t === undefined ||
        holder === undefined ||
        fence === undefined ||
        leaseId === undefined ||
        owner === undefined ||
        typeof body.validUntil !== "number"
      ) {
        throw new GatewayFailedError(
          201,
          undefined,
          `a lease answer without token, holder, fence, leaseId or validUntil: ${answer.body.toString("utf8").slice(0, 200)}`,
        );
      }
      const fences = fencesOf(body.fences) ?? [{ resource: owner, token: t, fence }];
      if (typeof asked !== "string" && fences.map((f) => f.resource).join("\0") !== asked.join("\0"))
        throw new GatewayFailedError(201, undefined, `a lease answer whose fences do not name ${asked.join(", ")} in order`);
      return { resource: owner, token: t, fences, holder, fence, leaseId, validUntil: body.validUntil };
    }
    const problem = problemOf(answer);
    const detail = text(problem.detail) ?? "";
    if ((answer.status === 409 && problem.type === LOCK_HELD) || answer.status === 503) throw new LockBusyError(answer.status, detail);
    if (answer.status === 409 && problem.type === STALE_TOKEN) {
      const [t, highest] = [token(problem.token), token(problem.highest)];
      if (t !== undefined && highest !== undefined)
        throw new RegistrationRefusedError(text(problem.resource) ?? resource, t, highest, detail);
    }
    throw unexpected(answer, "POST /v1/leases");
  }

  /** POST /v1/leases/release: deletes the lease's keys where they still hold its value. */
  async release(leaseId: string): Promise<void> {
    const answer = await this.send(
      "POST",
      "/v1/leases/release",
      { "content-type": "application/json" },
      Buffer.from(JSON.stringify({ leaseId })),
    );
    if (answer.status !== 204) throw unexpected(answer, "POST /v1/leases/release");
  }

  /** GET: the stored bytes and their version (the ETag). */
  async read(area: GatewayArea, key: string): Promise<{ body: Buffer; version: string }> {
    const answer = await this.send("GET", keyPath(area, key), {});
    if (answer.status !== 200) throw unexpected(answer, `GET ${area}`);
    return { body: answer.body, version: versionOf(answer.headers.etag) };
  }

  /** PUT with the lease's credential, and If-Match when `ifVersion` is given. Resolves with the new version. */
  async write(area: GatewayArea, key: string, body: Buffer, credential: string, ifVersion: string | undefined): Promise<string> {
    const headers: Record<string, string> = { "content-type": "application/json", "fencing-credential": credential };
    if (ifVersion !== undefined) headers["if-match"] = `"${ifVersion}"`;
    const answer = await this.send("PUT", keyPath(area, key), headers, body);
    if (answer.status === 200) return versionOf(answer.headers.etag);
    throw writeRefusal(answer, `PUT ${area}`, key, ifVersion);
  }

  /**
   * POST /v1/records: several records in one transaction, all or none, each under the credential of
   * the resource it names (`fences`: one credential per resource). Refusals as for write().
   */
  async writeAll(fences: readonly string[], writes: readonly RecordWrite[]): Promise<void> {
    const body = Buffer.from(JSON.stringify({ fences, writes }));
    const answer = await this.send("POST", "/v1/records", { "content-type": "application/json" }, body);
    if (answer.status === 200) return;
    const versioned = writes.find((w) => w.ifVersion !== undefined);
    throw writeRefusal(answer, "POST /v1/records", versioned?.key ?? writes[0]?.key ?? "", versioned?.ifVersion);
  }

  close(): void {
    this.agent.destroy();
  }

  private send(method: string, path: string, headers: Record<string, string>, body?: Buffer, signal?: AbortSignal): Promise<Answer> {
    return new Promise((resolve, reject) => {
      const all: Record<string, string | number> = { ...headers, authorization: this.authorization };
      if (body !== undefined) all["content-length"] = body.length;
      const options = {
        host: "127.0.0.1",
        port: this.port,
        method,
        path,
        headers: all,
        agent: this.agent,
        ...(signal === undefined ? {} : { signal }),
      };
      const req = request(options, (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (chunk: Buffer) => chunks.push(chunk));
        res.on("error", reject);
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
      });
      req.setTimeout(this.timeoutMs, () =>
        req.destroy(new Error(`no answer from the gateway within ${this.timeoutMs} ms: ${method} ${path}`)),
      );
      req.on("error", reject);
      req.end(body);
    });
  }
}
