import type { Readable } from "node:stream";
import { AnonymousCredential, ContainerClient, newPipeline, RestError, StorageSharedKeyCredential } from "@azure/storage-blob";
import { requestSignal } from "../deadline.js";
import { readAll } from "../objects/body.js";
import { neverSent } from "../system-errors.js";
import type { Condition, ConditionalPort, Failure, PortCapabilities, Revalidated, Stored, WriteOutcome } from "../conditional/port.js";

/**
 * The conditional port (../conditional/port.ts) on Azure block blobs. Each record is one blob of
 * the store's container, written whole by one Put Blob:
 *
 *   create   Put Blob with If-None-Match: *      refused: 409 BlobAlreadyExists (Azure and azurite)
 *   swap     Put Blob with If-Match: "<etag>"   refused: 412 ConditionNotMet (also on a missing blob)
 *   read     Get Blob                           absent: 404 BlobNotFound (ContainerNotFound is not absence)
 *   revalidate  Get Blob with If-None-Match     unchanged: 304
 *
 * Azure evaluates the condition on the blob atomically with the write, and gives every write that
 * lands a new ETag. ETags are kept bare (unquoted) and sent quoted. Bodies are inline only here:
 * the store that uses this adapter keeps each body in its manifest (capabilities.dataObjects false).
 *
 * Sent once: every request goes through a pipeline of the adapter's own, built from the caller's
 * client's URL and credential, with one try and no redirect followed (ONE_SEND). The SDK's default
 * resends a request whose answer was lost (a timeout, a reset, a 500 or 503) and follows a 3xx with
 * the same PUT, and a resent conditional write is checked against a fence read long gone
 * (PROTOCOL.md, "Sent once"). A token credential is not taken (ownCredential).
 */

/** The largest block blob one Put Blob writes (Azure, service version 2019-12-12 and later). */
const MAX_PUT_BLOB_BYTES = 5000 * 1024 * 1024;

/**
 * One send per request: no retry (the store decides what a lost answer means: read back, or report
 * the outcome unknown), and no redirect followed (the SDK's redirect policy, which the retry option
 * does not reach, would resend a PUT to where a 3xx points; the S3 store refuses redirects too).
 */
const ONE_SEND = { retryOptions: { maxTries: 1 }, redirectOptions: { maxRetries: 0 } } as const;

/** The HTTP status of an answer the SDK turned into an error; undefined: no answer came. */
function statusOf(err: unknown): number | undefined {
  return err instanceof RestError ? err.statusCode : undefined;
}

/** Azure's error code (x-ms-error-code), or the system error code of a failed connection. */
export function azureCode(err: unknown): string | undefined {
  return err instanceof RestError ? err.code : undefined;
}

/** Whether the answer says the blob itself is missing (not its container: that is a setup problem). */
function isAbsent(err: unknown): boolean {
  return statusOf(err) === 404 && azureCode(err) === "BlobNotFound";
}

/**
 * How a failed Put Blob is to be understood, by status and code only:
 * - 412 ConditionNotMet, and 409 BlobAlreadyExists (If-None-Match: * on a blob that exists): the
 *   condition did not hold, nothing was written.
 * - any 5xx (500 OperationTimedOut included: Azure says the operation may complete later; 503
 *   ServerBusy too: no Azure document says a throttled write was not applied), no answer, or an
 *   abort: the write may have landed.
 * - no connection: it was never sent. Anything else (403; 412 LeaseIdMissing, a blob someone leased;
 *   another 409; a 3xx, not followed; 400): retrying cannot help.
 */
export function classify(err: unknown): Failure {
  if (neverSent(err)) return "unsent";
  const status = statusOf(err);
  const code = azureCode(err);
  if ((status === 412 && code === "ConditionNotMet") || (status === 409 && code === "BlobAlreadyExists")) return "precondition";
  if (status === undefined || status < 300 || status >= 500) return "ambiguous";
  return "fatal";
}

/** A bare ETag as Azure wants it in a condition: quoted. */
function quoted(etag: string): string {
  return `"${etag}"`;
}

/** An ETag from an answer, bare. */
function bare(etag: string | undefined, what: string): string {
  if (etag === undefined || etag.length === 0) throw new Error(`Azure answered ${what} without an ETag`);
  return etag.replace(/^"(.*)"$/, "$1");
}

/**
 * What the store takes of the caller's ContainerClient: where it points, and how it signs. A shape,
 * not the SDK's class: a CommonJS caller's ContainerClient is another class than the one this ES
 * module imports, and TypeScript would refuse it (the class has private members).
 */
export interface AzureContainer {
  readonly url: string;
  readonly containerName: string;
  /** A StorageSharedKeyCredential, or an AnonymousCredential (a SAS in the URL). */
  readonly credential: object;
}

/** The credentials the store signs with: a shared key, or none (a SAS in the URL). */
type Credential = StorageSharedKeyCredential | AnonymousCredential;

/** The caller's client, on a pipeline of one try (see the header): its URL and credential, nothing else of its pipeline. */
export function oneTryContainer(client: AzureContainer): ContainerClient {
  const credential = ownCredential(client.credential);
  if (credential === undefined) throw new Error("the container client's credential is not one the SDK signs with");
  return new ContainerClient(client.url, newPipeline(credential, ONE_SEND));
}

/**
 * The caller's credential as this module's SDK signs with it; undefined: not a credential it knows.
 * The SDK tells a shared key from other credentials with `instanceof`: one made by another copy of
 * the SDK (the CommonJS build beside this ES module, or another version) would send every request
 * unsigned, and each would be refused (403). Such a credential is remade here from its account name
 * and key, as the SDK's own pipeline conversion recognises it (by its class's name). A token
 * credential (@azure/identity) is not taken: the SDK's bearer-token policy resends a request on a
 * 401 challenge, and waits for a token between the fence read and the write.
 */
export function ownCredential(credential: object): Credential | undefined {
  if (credential instanceof StorageSharedKeyCredential || credential instanceof AnonymousCredential) return credential;
  const named = (credential as { constructor?: { name?: unknown } }).constructor?.name;
  if (named === "AnonymousCredential") return new AnonymousCredential();
  const { accountName, accountKey } = credential as { accountName?: unknown; accountKey?: unknown };
  if (named === "StorageSharedKeyCredential" && typeof accountName === "string" && Buffer.isBuffer(accountKey)) {
    return new StorageSharedKeyCredential(accountName, accountKey.toString("base64"));
  }
  return undefined;
}

export class ConditionalBlobs implements ConditionalPort {
  readonly capabilities: PortCapabilities = Object.freeze({ notModified: true, dataObjects: false, maxRecordBytes: MAX_PUT_BLOB_BYTES });

  constructor(
    /** A client on a one-try pipeline (oneTryContainer). */
    readonly container: ContainerClient,
    /** The bound on a request sent without a call's signal (cleanup, the probe's own records). */
    private readonly timeoutMs: number,
  ) {}

  /** Every request is bounded: by the call's deadline, or on its own. */
  private bounded(signal: AbortSignal | undefined): AbortSignal {
    return signal ?? requestSignal(this.timeoutMs);
  }

  async read(key: string, signal?: AbortSignal): Promise<Stored | undefined> {
    return this.download(key, undefined, signal).then((found) => (found === "unchanged" ? undefined : found));
  }

  async readIfChanged(key: string, etag: string, signal?: AbortSignal): Promise<Revalidated> {
    const found = await this.download(key, etag, signal);
    return found === "unchanged" ? { unchanged: true } : { unchanged: false, object: found };
  }

  /** Get Blob, with If-None-Match when `etag` is given (a 304 is "unchanged"); undefined: absent. */
  private async download(key: string, etag: string | undefined, signal?: AbortSignal): Promise<Stored | "unchanged" | undefined> {
    const abortSignal = this.bounded(signal);
    try {
      const conditions = etag === undefined ? {} : { ifNoneMatch: quoted(etag) };
      const answer = await this.container.getBlockBlobClient(key).download(0, undefined, { conditions, abortSignal });
      const stream = answer.readableStreamBody;
      if (stream === undefined) throw new Error(`Azure answered Get Blob of ${JSON.stringify(key)} without a body`);
      return { etag: bare(answer.etag, "Get Blob"), body: await readAll(stream as Readable) };
    } catch (err) {
      if (etag !== undefined && statusOf(err) === 304) return "unchanged";
      if (isAbsent(err)) return undefined;
      throw err;
    }
  }

  /** Never throws: the outcome says how a failure is to be understood. */
  async write(key: string, body: Buffer, condition: Condition, signal?: AbortSignal): Promise<WriteOutcome> {
    try {
      const conditions = "ifMatch" in condition ? { ifMatch: quoted(condition.ifMatch) } : { ifNoneMatch: "*" };
      const answer = await this.container
        .getBlockBlobClient(key)
        .upload(body, body.length, { conditions, abortSignal: this.bounded(signal) });
      return { ok: true, etag: bare(answer.etag, "Put Blob") };
    } catch (err) {
      return { ok: false, failure: classify(err), error: err };
    }
  }

  async remove(key: string, signal?: AbortSignal): Promise<void> {
    await this.container.getBlockBlobClient(key).deleteIfExists({ abortSignal: this.bounded(signal) });
  }

  /** One spelling of an ETag only: a refusal of the current one is never the spelling's fault. */
  noteRefusedOwnEtag(): boolean {
    return false;
  }
}
