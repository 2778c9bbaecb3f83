import { randomBytes } from "node:crypto";
import { DeleteObjectCommand, GetObjectCommand, PutObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import { StoreSetupError } from "../errors.js";
import { requestSignal } from "../deadline.js";
import { retriedRefusal, statusOf } from "../aws/answers.js";
import { neverSent } from "../system-errors.js";
import { isAbsent } from "./failures.js";
import { sendOnce } from "../aws/sent-once.js";
import type { Condition, ConditionalPort, Failure, PortCapabilities, Revalidated, Stored, WriteOutcome } from "../conditional/port.js";

/**
 * The conditional port (../conditional/port.ts) on S3: a PUT that lands only if the object is
 * absent (If-None-Match: *) or still has a given ETag (If-Match), made portable across AWS S3,
 * MinIO and Ceph radosgw, which disagree on details.
 */

/**
 * Whether a failed PUT with this status may have been applied: no status at all (no answer), a 5xx,
 * or a 2xx — the server accepted it, and only reading the rest of its answer failed.
 */
function mayHaveLanded(status: number | undefined): boolean {
  return status === undefined || status < 300 || status >= 500;
}

export function classify(err: unknown): Failure {
  if (neverSent(err)) return "unsent";
  const status = statusOf(err);
  if (mayHaveLanded(status)) return "ambiguous";
  if (retriedRefusal(err)) return "throttled";
  if (status === 412) return "precondition";
  if (status === 409) return "conflict";
  if (status === 404) return isAbsent(err) ? "precondition" : "fatal";
  return "fatal";
}

/** The SDK's per-request options for a signal: none without one (its types refuse an explicit undefined). */
export function sendOptions(signal: AbortSignal | undefined): { abortSignal?: AbortSignal } {
  return signal === undefined ? {} : { abortSignal: signal };
}

/** ETags travel quoted in responses; keep them bare so the quoting can be chosen per backend when sending. */
function bareEtag(etag: string): string {
  return etag.replace(/^W\//, "").replaceAll('"', "");
}

export type EtagForm = "bare" | "quoted";

/** S3's largest single PUT (5 GiB); the store puts bodies over its inline limit in data objects anyway. */
const MAX_PUT_BYTES = 5 * 1024 ** 3;

export class ConditionalObjects implements ConditionalPort {
  readonly capabilities: PortCapabilities = Object.freeze({ notModified: true, dataObjects: true, maxRecordBytes: MAX_PUT_BYTES });

  /**
   * radosgw matches If-Match only against the bare ETag (a quoted one always fails); AWS and MinIO
   * accept the bare form too. Bare is tried first; a backend that refuses its own current ETag in
   * that form gets the quoted one, once (see noteRefusedOwnEtag).
   */
  private form: EtagForm = "bare";
  private formSettled = false;

  constructor(
    readonly client: S3Client,
    readonly bucket: string,
    /** The bound on a request sent without a call's signal (cleanup, the probe's own objects). */
    private readonly timeoutMs: number,
  ) {}

  /** Every request is bounded: by the call's deadline, or on its own. */
  private bounded(signal: AbortSignal | undefined): { abortSignal: AbortSignal } {
    return { abortSignal: signal ?? requestSignal(this.timeoutMs) };
  }

  get etagForm(): EtagForm {
    return this.form;
  }

  /** Fixes the form after a probe proved it (verify()). */
  settleEtagForm(form: EtagForm): void {
    this.form = form;
    this.formSettled = true;
  }

  /**
   * A 412 came back although the object still had exactly the ETag we sent: the backend did not
   * recognise our spelling of it. ETags of our objects never repeat, so no other explanation exists.
   * Returns false when switching cannot help (both forms failed, or the form was already proven).
   */
  noteRefusedOwnEtag(): boolean {
    if (this.formSettled) return false;
    this.form = this.form === "bare" ? "quoted" : "bare";
    this.formSettled = true;
    return true;
  }

  private etagHeader(etag: string): string {
    return this.form === "bare" ? etag : `"${etag}"`;
  }

  async read(key: string, signal?: AbortSignal): Promise<Stored | undefined> {
    const command = new GetObjectCommand({ Bucket: this.bucket, Key: key });
    try {
      const res = await this.client.send(command, this.bounded(signal));
      if (res.Body === undefined || res.ETag === undefined) throw new Error(`GET ${key} returned no body or no ETag`);
      return { etag: bareEtag(res.ETag), body: Buffer.from(await res.Body.transformToByteArray()) };
    } catch (err) {
      if (isAbsent(err)) return undefined;
      throw err;
    }
  }

  /**
   * Reads the object unless it still has `etag` (GET with If-None-Match): a 304 answers "unchanged"
   * with no body. Sound only for objects whose ETags never repeat — every fence and manifest body
   * carries a fresh writeId — so that an unchanged ETag means unchanged bytes. Resolves as soon as
   * the 304's status line is in, before the SDK has processed it. A backend that ignores the
   * condition answers with the object (correct, only slower); verify() proves that this one answers
   * a replaced ETag with the object, never with 304.
   */
  readIfChanged(key: string, etag: string, signal?: AbortSignal): Promise<Revalidated> {
    const command = new GetObjectCommand({ Bucket: this.bucket, Key: key, IfNoneMatch: this.etagHeader(etag) });
    let notModified!: (found: Revalidated) => void;
    const early = new Promise<Revalidated>((resolve) => (notModified = resolve));
    // Right inside the deserializer, where the HTTP response arrives: a 304 is known before the SDK
    // has processed it. (Priority normal: inside the deserializer, outside whatever a client has at
    // the innermost end of its stack, so that the 304 reaches the store only through it.)
    command.middlewareStack.add(
      (next) => async (args) => {
        const out = await next(args);
        if ((out.response as { statusCode?: unknown }).statusCode === 304) notModified({ unchanged: true });
        return out;
      },
      { step: "deserialize", priority: "normal", name: "fencedNotModifiedSeen" },
    );
    // Around the deserializer, which makes every status from 300 on an error: 304 is the answer asked
    // for, not a failure (a logger on the client would otherwise report one per fence read).
    command.middlewareStack.add(
      (next) => async (args) => {
        try {
          return await next(args);
        } catch (err) {
          if (statusOf(err) !== 304) throw err;
          return { response: (err as { $response?: unknown }).$response, output: { $metadata: { httpStatusCode: 304 } } };
        }
      },
      { step: "deserialize", priority: "high", name: "fencedNotModifiedIsAnAnswer" },
    );
    const full = (async (): Promise<Revalidated> => {
      try {
        const res = await this.client.send(command, this.bounded(signal));
        if (res.$metadata.httpStatusCode === 304) return { unchanged: true };
        if (res.Body === undefined || res.ETag === undefined) throw new Error(`GET ${key} returned no body or no ETag`);
        return { unchanged: false, object: { etag: bareEtag(res.ETag), body: Buffer.from(await res.Body.transformToByteArray()) } };
      } catch (err) {
        if (statusOf(err) === 304) return { unchanged: true };
        if (isAbsent(err)) return { unchanged: false, object: undefined };
        throw err;
      }
    })();
    return Promise.race([early, full]);
  }

  /** Never throws: the outcome says how a failure is to be understood. */
  async write(key: string, body: Buffer, condition: Condition, signal?: AbortSignal): Promise<WriteOutcome> {
    try {
      const command = new PutObjectCommand({
        Bucket: this.bucket,
        Key: key,
        Body: body,
        ContentLength: body.length,
        ...("ifMatch" in condition ? { IfMatch: this.etagHeader(condition.ifMatch) } : { IfNoneMatch: "*" }),
      });
      // Once, at once, never again by the SDK, on connections of the store's own (sent-once.ts).
      const res = await sendOnce(this.client, command, (options) => this.client.send(command, options), this.bounded(signal));
      if (res.ETag === undefined) throw new Error(`PUT ${key} returned no ETag`);
      if ("ifMatch" in condition) this.formSettled = true;
      return { ok: true, etag: bareEtag(res.ETag) };
    } catch (err) {
      return { ok: false, failure: classify(err), error: err };
    }
  }

  /** Unconditional: only used on objects whose names are unique per write (data, probes). */
  async remove(key: string, signal?: AbortSignal): Promise<void> {
    await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: key }), this.bounded(signal));
  }

  /**
   * Proves that the backend honours both conditions on PUT, and learns its ETag spelling. Emulators
   * exist that accept the headers and ignore them (or honour them on GET only); a store built on one
   * would silently lose the ratchet.
   */
  async probe(keyPrefix: string, signal?: AbortSignal): Promise<{ etagForm: EtagForm }> {
    const key = `${keyPrefix}${randomBytes(16).toString("hex")}`;
    const missing = `${key}-missing`;
    const fail = (what: string): never => {
      throw new StoreSetupError(
        "s3",
        "conditional-writes-unsupported",
        `S3 backend at bucket ${JSON.stringify(this.bucket)} does not honour conditional writes: ${what}. Fenced writes would not be safe on it.`,
      );
    };
    try {
      const created = await this.write(key, Buffer.from("probe-1"), { ifNoneMatch: true }, signal);
      if (!created.ok) throw created.error;
      const again = await this.write(key, Buffer.from("probe-2"), { ifNoneMatch: true }, signal);
      if (again.ok) fail("PUT with If-None-Match: * replaced an existing object");
      if (!again.ok && again.failure !== "precondition" && again.failure !== "conflict") throw again.error;

      let swapped: WriteOutcome | undefined;
      for (const form of ["bare", "quoted"] as const) {
        this.form = form;
        swapped = await this.write(key, Buffer.from(`probe-3-${form}`), { ifMatch: created.etag }, signal);
        if (swapped.ok || swapped.failure !== "precondition") break;
      }
      if (swapped === undefined || !swapped.ok) {
        if (swapped !== undefined && swapped.failure !== "precondition") throw swapped.error;
        return fail("PUT with If-Match on the current ETag was refused in both quoted and unquoted form");
      }
      this.settleEtagForm(this.form);
      // Fence reads are conditional (If-None-Match): a 304 must mean that the ETag sent is current.
      const swappedBody = `probe-3-${this.form}`;
      const replaced = await this.readIfChanged(key, created.etag, signal);
      if (replaced.unchanged || replaced.object?.body.toString() !== swappedBody)
        fail("GET with If-None-Match on a replaced ETag did not return the current object");
      const current = await this.readIfChanged(key, swapped.etag, signal);
      if (!current.unchanged && current.object?.body.toString() !== swappedBody)
        fail("GET with If-None-Match on the current ETag returned another object");

      const stale = await this.write(key, Buffer.from("probe-4"), { ifMatch: created.etag }, signal);
      if (stale.ok) fail("PUT with a stale If-Match ETag replaced the object");
      if (!stale.ok && stale.failure !== "precondition" && stale.failure !== "conflict") throw stale.error;
      const absent = await this.write(missing, Buffer.from("probe-5"), { ifMatch: created.etag }, signal);
      if (absent.ok) fail("PUT with If-Match on a missing key created it");
      if (!absent.ok && absent.failure !== "precondition" && absent.failure !== "conflict") throw absent.error;
      const now = await this.read(key, signal);
      if (now?.body.toString() !== `probe-3-${this.form}`) fail("a refused conditional PUT changed the object");
      return { etagForm: this.form };
    } finally {
      // Bounded on their own: the call's deadline may have passed already.
      await Promise.allSettled([this.remove(key), this.remove(missing)]);
    }
  }
}
