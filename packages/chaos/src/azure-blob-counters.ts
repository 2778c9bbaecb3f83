import type { Readable } from "node:stream";
import { BlobServiceClient, StorageSharedKeyCredential, type ContainerClient } from "@azure/storage-blob";
import type { Fence } from "@fenced/fence";
import { FencedAzureBlob } from "@fenced/store/azure-blob";
import { INITIAL, plainKey } from "./counter-keys.js";
import type { CounterStore, CounterStoreOptions, StoreConnection, WriteLease } from "./counter-store.js";
import { EMPTY_DOC, parseDoc, type CounterDoc, type Mode } from "./history.js";

/**
 * The counter documents in an Azure Blob container (azurite), as S3Counters keeps them in a bucket:
 * - unfenced: a plain Put Blob / Get Blob of a blob of its own (`plain/<key>.json`), beside
 *   FencedAzureBlob's prefix and never read by it;
 * - ratchet and full: FencedAzureBlob's put() and getBytes() of the document's JSON bytes.
 * No transaction over blobs: no writeAll, so a pair's counters are written one by one, each under its own fence.
 */
export class AzureBlobCounters implements CounterStore {
  private readonly container: ContainerClient;
  private readonly store: FencedAzureBlob;
  private readonly timeoutMs: number;

  constructor(
    connection: Extract<StoreConnection, { backend: "azure-blob" }>,
    private readonly mode: Mode,
    { timeoutMs }: CounterStoreOptions,
  ) {
    this.timeoutMs = timeoutMs;
    const credential = new StorageSharedKeyCredential(connection.accountName, connection.accountKey);
    this.container = new BlobServiceClient(connection.url, credential).getContainerClient(connection.container);
    // The store sends on a pipeline of its own (one try per request), built from this client's URL and credential.
    this.store = new FencedAzureBlob(this.container, { timeoutMs });
  }

  async read(key: string): Promise<{ doc: CounterDoc; version: string | undefined }> {
    if (this.mode === "unfenced") {
      const abortSignal = AbortSignal.timeout(this.timeoutMs);
      const answer = await this.container.getBlockBlobClient(plainKey(key)).download(0, undefined, { abortSignal });
      const stream = answer.readableStreamBody;
      if (stream === undefined) throw new Error(`Get Blob of counter ${key} answered without a body`);
      return { doc: parseDoc(JSON.parse((await readAll(stream as Readable)).toString("utf8"))), version: undefined };
    }
    const object = await this.store.getBytes(key);
    if (object === undefined) throw new Error(`counter ${key} does not exist`);
    return { doc: parseDoc(JSON.parse(object.body.toString("utf8"))), version: object.version };
  }

  async write(key: string, doc: CounterDoc, { fence }: WriteLease, version: string | undefined): Promise<void> {
    const body = Buffer.from(JSON.stringify(doc));
    if (this.mode === "unfenced") {
      await this.container.getBlockBlobClient(plainKey(key)).upload(body, body.length, {
        blobHTTPHeaders: { blobContentType: "application/json" },
        abortSignal: AbortSignal.timeout(this.timeoutMs),
      });
      return;
    }
    const options = this.mode === "full" && version !== undefined ? { fence, ifVersion: version } : { fence };
    await this.store.put(key, body, { ...options, contentType: "application/json" });
  }

  async register(fence: Fence | readonly Fence[]): Promise<void> {
    await this.store.register(fence);
  }

  async init(keys: readonly { key: string; resource: string }[]): Promise<void> {
    for (const { key, resource } of keys) {
      if (this.mode === "unfenced") await this.write(key, EMPTY_DOC, { fence: INITIAL(resource), credential: undefined }, undefined);
      else await this.store.put(key, Buffer.from(JSON.stringify(EMPTY_DOC)), { fence: INITIAL(resource), contentType: "application/json" });
    }
  }

  async close(): Promise<void> {
    await this.store.flush();
  }
}

async function readAll(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as Uint8Array));
  return Buffer.concat(chunks);
}
