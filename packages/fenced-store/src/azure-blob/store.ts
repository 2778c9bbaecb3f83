import { Readable } from "node:stream";
import { InvalidArgumentError } from "@fenced/fence";
import type {
  ObjectStore,
  ObjectWriteOptions,
  SignalOptions,
  StoreCapabilities,
  StoredObject,
  TransferOptions,
  WriteOptions,
  WriteResult,
} from "../contract.js";
import { CorruptStateError } from "../errors.js";
import { assertKey, type CheckedFence, type Fence, type FenceSet } from "../fence.js";
import { assertBody, assertContentLength, assertContentType, toPayload, type ObjectBody } from "../objects/body.js";
import { probePort } from "../conditional/probe.js";
import { CasCalls, checkedWrite } from "../cas/calls.js";
import { StoreIo, type Found } from "../cas/io.js";
import { probeKeyPrefix } from "../cas/layout.js";
import { signalOptions } from "../cas/options.js";
import { ConditionalBlobs, oneTryContainer, ownCredential, type AzureContainer } from "./blobs.js";
import { azureFailures } from "./failures.js";
import { validateOptions, type FencedAzureBlobOptions } from "./options.js";

export type { FencedAzureBlobOptions } from "./options.js";

/** getBytes(): the body read whole. */
export interface AzureBlobBytes extends Omit<StoredObject, "body" | "size"> {
  readonly body: Buffer;
}

/**
 * Fenced writes to Azure Blob Storage: the algorithm of the S3 store (../cas/) over block blobs
 * (blobs.ts). A key's manifest blob and a resource's fence blob are written with If-Match on their
 * own ETag (If-None-Match: * to create); a write the manifest or the fence does not admit is refused
 * and changes nothing. Every body is kept in its manifest blob (at most maxBodyBytes). No
 * transaction over blobs: register() raises each fence blob on its own. See PROTOCOL.md, "Azure Blob".
 */
export class FencedAzureBlob implements ObjectStore {
  /** No transaction over blobs: register() raises each fence blob on its own. A tombstone is a manifest, ifVersion may name it. */
  readonly capabilities: StoreCapabilities = Object.freeze({ atomicRegister: false, ifVersionMatchesTombstone: true });
  readonly container: string;
  readonly prefix: string;
  /** The largest body put() takes, in bytes. */
  readonly maxBodyBytes: number;
  private readonly io: StoreIo;
  private readonly blobs: ConditionalBlobs;
  private readonly calls: CasCalls;

  /**
   * `container`: a ContainerClient from @azure/storage-blob. The store sends on a pipeline of its own
   * built from the client's URL and credential (a shared key, or a SAS in the URL), with one send per
   * request (blobs.ts); the client's other pipeline options are not used.
   */
  constructor(container: AzureContainer, options?: FencedAzureBlobOptions) {
    const client = container as Partial<AzureContainer> | null;
    if (typeof client !== "object" || client === null || typeof client.url !== "string" || typeof client.containerName !== "string") {
      throw new InvalidArgumentError("container", "must be a ContainerClient from @azure/storage-blob");
    }
    if (typeof client.credential !== "object" || client.credential === null || ownCredential(client.credential) === undefined) {
      throw new InvalidArgumentError(
        "container",
        "must sign with a StorageSharedKeyCredential, or an AnonymousCredential with a SAS in its URL: a token credential's policy resends a write on a 401 challenge",
      );
    }
    const resolved = validateOptions(options);
    this.container = container.containerName;
    this.prefix = resolved.prefix;
    this.maxBodyBytes = resolved.maxBodyBytes;
    this.blobs = new ConditionalBlobs(oneTryContainer(container), resolved.timeoutMs);
    this.io = new StoreIo(this.blobs, resolved, azureFailures(this.container));
    this.calls = new CasCalls(this.io, "azure-blob");
  }

  /**
   * Proves the container is there, and that it refuses a stale If-Match and an If-None-Match: * on
   * an existing blob; throws StoreSetupError otherwise.
   */
  async verify(options?: SignalOptions): Promise<void> {
    const { signal } = signalOptions(options);
    await this.calls.call("verify", undefined, signal, async (deadline) => {
      await this.blobs.container.getProperties({ abortSignal: deadline.signal });
      await probePort(this.blobs, "azure-blob", probeKeyPrefix(this.prefix), deadline.signal);
    });
  }

  /**
   * Raises each resource's fence blob to its fence (writes no data): from then on a lower token, or
   * the same token from another holder, is refused on every key of the resource. StaleTokenError if
   * a fence blob does not admit it; the others are raised or not, each on its own.
   */
  async register(fence: Fence | FenceSet, options?: SignalOptions): Promise<void> {
    await this.calls.register(fence, options);
  }

  /** The resource's fence blob as it is now: the highest token registered or written with, and its holder. */
  fence(resource: string, options?: SignalOptions): Promise<CheckedFence | undefined> {
    return this.calls.fence(resource, options);
  }

  /**
   * Writes `body` as the key's new version, if the fence and ifVersion are admitted. A stream is read
   * whole first (the call's deadline starts after it; options.signal aborts it), and refused if it
   * runs past maxBodyBytes or differs from contentLength.
   */
  async put(key: string, body: ObjectBody, options: ObjectWriteOptions): Promise<WriteResult> {
    assertKey(key);
    assertBody(body);
    const o = checkedWrite(options);
    const { contentType, contentLength } = o.raw;
    assertContentType(contentType);
    assertContentLength(contentLength, body);
    const payload = toPayload(body);
    const bytes = Buffer.isBuffer(payload) ? payload : await this.readStream(payload, o.signal);
    if (bytes.length > this.maxBodyBytes) throw this.tooLarge(bytes.length);
    if (contentLength !== undefined && bytes.length !== contentLength) {
      throw new InvalidArgumentError("contentLength", `is ${contentLength}, but the stream had ${bytes.length} bytes`);
    }
    return this.calls.write("put", key, o, { kind: "inline", bytes }, contentType);
  }

  /** Writes a tombstone (the ratchet and the key's owner survive it); get() then reads undefined. */
  async delete(key: string, options: WriteOptions): Promise<WriteResult> {
    assertKey(key);
    return this.calls.write("delete", key, checkedWrite(options), { kind: "tombstone" });
  }

  /** The key's current version, its body a stream of bytes already read; undefined if absent or deleted. */
  async get(key: string, options?: SignalOptions): Promise<StoredObject | undefined> {
    const found = await this.getBytes(key, options);
    if (found === undefined) return undefined;
    return { ...found, body: Readable.from([found.body], { objectMode: false }), size: found.body.length };
  }

  /** The key's current version with its body as bytes; undefined if absent or deleted. */
  async getBytes(key: string, options?: SignalOptions): Promise<AzureBlobBytes | undefined> {
    assertKey(key);
    const { signal } = signalOptions(options);
    const found = await this.calls.call("get", key, signal, (deadline) => this.io.readManifest(key, deadline.signal));
    return found === null ? undefined : current(key, found);
  }

  /**
   * Hands the key to another resource: one manifest write that requires the key to belong to
   * from.resource, admits both fences (raising both fence blobs), and records `to` as the writer and
   * to.resource as the owner; the body is unchanged, the version new. Undefined if the key was never
   * written (with ifVersion, a VersionMismatchError instead).
   */
  async transfer(key: string, options: TransferOptions): Promise<WriteResult | undefined> {
    assertKey(key);
    return this.calls.transfer(key, options);
  }

  /** Waits for the store's background work. */
  async flush(): Promise<void> {
    await this.io.flush();
  }

  /** A stream read whole, refused as soon as it runs past maxBodyBytes (the rest is not read); `signal` destroys it with its reason. */
  private async readStream(stream: Readable, signal: AbortSignal | undefined): Promise<Buffer> {
    const abort = (): void => void stream.destroy(signal?.reason as Error);
    signal?.addEventListener("abort", abort, { once: true });
    try {
      const chunks: Buffer[] = [];
      let length = 0;
      for await (const chunk of stream) {
        const bytes = Buffer.isBuffer(chunk) ? chunk : typeof chunk === "string" ? Buffer.from(chunk) : Buffer.from(chunk as Uint8Array);
        length += bytes.length;
        if (length > this.maxBodyBytes) {
          stream.destroy();
          throw this.tooLarge(length);
        }
        chunks.push(bytes);
      }
      return Buffer.concat(chunks, length);
    } finally {
      signal?.removeEventListener("abort", abort);
    }
  }

  private tooLarge(length: number): InvalidArgumentError {
    return new InvalidArgumentError(
      "body",
      `is ${length} bytes or more; this store takes bodies of at most ${this.maxBodyBytes} (maxBodyBytes)`,
    );
  }
}

/** A live version from its manifest; undefined for a tombstone. */
function current(key: string, found: Found): AzureBlobBytes | undefined {
  const { header } = found.snap;
  if (header.body.kind === "tombstone") return undefined;
  if (header.body.kind !== "inline") {
    throw new CorruptStateError(
      "azure-blob",
      "manifest",
      key,
      `the manifest of ${JSON.stringify(key)} names a data object, which this store never writes`,
    );
  }
  return {
    body: found.inline ?? Buffer.alloc(0),
    version: header.writeId,
    token: BigInt(header.token),
    holder: header.holder,
    resource: header.owner,
    contentType: header.contentType,
  };
}
