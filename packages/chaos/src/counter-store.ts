import { GetObjectCommand, PutObjectCommand, S3Client } from "@aws-sdk/client-s3";
import { type Fence } from "@fenced/fence";
import { FencedPostgres } from "@fenced/store/postgres";
import { FencedS3 } from "@fenced/store/s3";
import pg from "pg";
import { INITIAL, plainKey } from "./counter-keys.js";
import { EMPTY_DOC, parseDoc, type CounterDoc, type Mode } from "./history.js";

/** How a worker (or the controller) reaches the store of one run; JSON, so it can cross the process boundary. */
export type StoreConnection =
  | { readonly backend: "postgres"; readonly url: string; readonly schema: string }
  | {
      readonly backend: "s3";
      readonly endpoint: string;
      readonly region: string;
      readonly accessKeyId: string;
      readonly secretAccessKey: string;
      readonly bucket: string;
    }
  | {
      readonly backend: "dynamodb";
      readonly endpoint: string;
      readonly region: string;
      readonly accessKeyId: string;
      readonly secretAccessKey: string;
      /** Partition key `key`, a String: FencedDynamo's items under its prefix, the plain items of "unfenced" beside them. */
      readonly table: string;
    }
  | {
      readonly backend: "azure-blob";
      /** The account's URL (azurite serves accounts path-style: http://host:port/<account>). */
      readonly url: string;
      readonly accountName: string;
      readonly accountKey: string;
      readonly container: string;
    };

/** What a write is fenced with: the lease's fence, and the gateway's signed credential for it when it came from a gateway. */
export interface WriteLease {
  readonly fence: Fence;
  readonly credential: string | undefined;
}

/** One counter of a pair's write (`--pairs`): its key, its new document, the fence of its own resource, the version read. */
export interface CounterWrite {
  readonly key: string;
  readonly doc: CounterDoc;
  readonly fence: Fence;
  /** Through a gateway: the signed credential of the fence's resource. */
  readonly credential: string | undefined;
  readonly version: string | undefined;
}

/** What a worker does with the counters, directly or through a gateway. */
export interface CounterAccess {
  read(key: string): Promise<{ doc: CounterDoc; version: string | undefined }>;
  write(key: string, doc: CounterDoc, lease: WriteLease, version: string | undefined): Promise<void>;
  /** Several counters in one transaction, all or none (PostgreSQL); absent where each key is written on its own, under its own fence (S3). */
  writeAll?(writes: readonly CounterWrite[]): Promise<void>;
  close(): Promise<void>;
}

/**
 * The counter documents as one configuration reads and writes them:
 * - unfenced: a plain UPDATE / a plain PutObject / a plain PutItem / a plain Put Blob (the token is
 *   carried but nobody checks it);
 * - ratchet: a fenced put, nothing else;
 * - full: register() right after acquiring, and every put carries ifVersion (the version read).
 */
export interface CounterStore extends CounterAccess {
  /** Fence-on-acquire (only used in "full"): one fence, or every fence of a lease of several resources in one call. */
  register(fence: Fence | readonly Fence[]): Promise<void>;
  /** Creates the namespace and an empty counter; run once by the controller before the workers start. */
  init(keys: readonly { key: string; resource: string }[]): Promise<void>;
}

export interface CounterStoreOptions {
  /**
   * The deadline of every call, in ms: the stores' `timeoutMs`, and the same bound on the raw
   * clients of "unfenced" (pg's query_timeout, an abort signal on each S3, DynamoDB or Azure request).
   */
  readonly timeoutMs: number;
}

/** DynamoDB's and Azure Blob's counters are loaded only where used: a worker of another backend never loads their SDKs. */
export async function openCounterStore(connection: StoreConnection, mode: Mode, options: CounterStoreOptions): Promise<CounterStore> {
  switch (connection.backend) {
    case "postgres":
      return new PostgresCounters(connection, mode, options);
    case "s3":
      return new S3Counters(connection, mode, options);
    case "dynamodb":
      return new (await import("./dynamodb-counters.js")).DynamoCounters(connection, mode, options);
    case "azure-blob":
      return new (await import("./azure-blob-counters.js")).AzureBlobCounters(connection, mode, options);
  }
}

/** Objects up to this size are stored inside their manifest: the document grows by one log entry per increment, and every write stays one conditional PUT. */
export const INLINE_LIMIT = 4 * 1024 * 1024;

class PostgresCounters implements CounterStore {
  private readonly pool: pg.Pool;
  private readonly store: FencedPostgres;
  private readonly records: string;
  private readonly plainUpdate: string;

  constructor(
    connection: Extract<StoreConnection, { backend: "postgres" }>,
    private readonly mode: Mode,
    { timeoutMs }: CounterStoreOptions,
  ) {
    this.pool = new pg.Pool({ connectionString: connection.url, max: 2, connectionTimeoutMillis: timeoutMs, query_timeout: timeoutMs });
    // An idle connection broken by a fault would otherwise be an unhandled 'error' that kills the worker.
    this.pool.on("error", () => undefined);
    const storeOptions = { schema: connection.schema, timeoutMs };
    this.store = new FencedPostgres(this.pool, storeOptions);
    // The schema name passed FencedPostgres's check (/^[a-z_][a-z0-9_]{0,62}$/), so it is safe to quote here.
    this.records = `"${connection.schema}".records`;
    this.plainUpdate = `UPDATE ${this.records} SET value = $2 WHERE key = $1`;
  }

  async read(key: string): Promise<{ doc: CounterDoc; version: string | undefined }> {
    // get() is an ordinary SELECT in every mode: reads are never fenced.
    const record = await this.store.get(key);
    if (record === undefined) throw new Error(`counter ${key} does not exist`);
    return { doc: parseDoc(record.value), version: record.version };
  }

  async write(key: string, doc: CounterDoc, { fence }: WriteLease, version: string | undefined): Promise<void> {
    const value = { count: doc.count, log: [...doc.log] };
    if (this.mode === "unfenced") {
      const result = await this.pool.query(this.plainUpdate, [key, JSON.stringify(value)]);
      if (result.rowCount !== 1) throw new Error(`plain UPDATE of ${key} touched ${String(result.rowCount)} rows`);
      return;
    }
    await this.store.put(key, value, this.mode === "full" && version !== undefined ? { fence, ifVersion: version } : { fence });
  }

  /**
   * unfenced: one plain UPDATE of both rows (in key order: two writers who both believe they hold
   * the lease lock the rows in one order); ratchet and full: putAll() under the fences of both
   * resources, each record naming its own (full: each with the version read).
   */
  async writeAll(writes: readonly CounterWrite[]): Promise<void> {
    const value = (doc: CounterDoc): { count: number; log: string[] } => ({ count: doc.count, log: [...doc.log] });
    if (this.mode !== "unfenced") {
      await this.store.putAll(
        writes.map((w) => ({
          key: w.key,
          value: value(w.doc),
          resource: w.fence.resource,
          ...(this.mode === "full" && w.version !== undefined ? { ifVersion: w.version } : {}),
        })),
        { fences: writes.map((w) => w.fence) },
      );
      return;
    }
    // One statement, autocommitted: atomic, and no row stays locked across a round trip (a worker
    // paused, or its packets held, between two statements of a transaction would block every other writer).
    const sorted = [...writes].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    const rows = sorted.map((_, i) => `($${2 * i + 1}, $${2 * i + 2}::jsonb)`).join(", ");
    const text = `UPDATE ${this.records} AS r SET value = v.value FROM (VALUES ${rows}) AS v(key, value) WHERE r.key = v.key`;
    const result = await this.pool.query(
      text,
      sorted.flatMap((w) => [w.key, JSON.stringify(value(w.doc))]),
    );
    if (result.rowCount !== writes.length)
      throw new Error(`plain UPDATE of ${writes.map((w) => w.key).join(", ")} touched ${String(result.rowCount)} rows`);
  }

  async register(fence: Fence | readonly Fence[]): Promise<void> {
    await this.store.register(fence);
  }

  async init(keys: readonly { key: string; resource: string }[]): Promise<void> {
    await this.store.migrate();
    for (const { key, resource } of keys) await this.store.put(key, { count: 0, log: [] }, { fence: INITIAL(resource) });
  }

  async close(): Promise<void> {
    await this.pool.end();
  }
}

class S3Counters implements CounterStore {
  private readonly client: S3Client;
  private readonly store: FencedS3;
  private readonly bucket: string;
  private readonly timeoutMs: number;

  constructor(
    connection: Extract<StoreConnection, { backend: "s3" }>,
    private readonly mode: Mode,
    { timeoutMs }: CounterStoreOptions,
  ) {
    this.timeoutMs = timeoutMs;
    this.client = new S3Client({
      endpoint: connection.endpoint,
      region: connection.region,
      credentials: { accessKeyId: connection.accessKeyId, secretAccessKey: connection.secretAccessKey },
      forcePathStyle: true,
      requestChecksumCalculation: "WHEN_REQUIRED",
      responseChecksumValidation: "WHEN_REQUIRED",
    });
    this.bucket = connection.bucket;
    this.store = new FencedS3(this.client, { bucket: connection.bucket, inlineLimit: INLINE_LIMIT, timeoutMs });
  }

  async read(key: string): Promise<{ doc: CounterDoc; version: string | undefined }> {
    if (this.mode === "unfenced") {
      const signal = AbortSignal.timeout(this.timeoutMs);
      const object = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: plainKey(key) }), { abortSignal: signal });
      const text = (await object.Body?.transformToString("utf8")) ?? "";
      return { doc: parseDoc(JSON.parse(text)), version: undefined };
    }
    const object = await this.store.getBytes(key);
    if (object === undefined) throw new Error(`counter ${key} does not exist`);
    return { doc: parseDoc(JSON.parse(object.body.toString("utf8"))), version: object.version };
  }

  async write(key: string, doc: CounterDoc, { fence }: WriteLease, version: string | undefined): Promise<void> {
    const body = Buffer.from(JSON.stringify(doc));
    if (this.mode === "unfenced") {
      await this.client.send(
        new PutObjectCommand({ Bucket: this.bucket, Key: plainKey(key), Body: body, ContentType: "application/json" }),
        { abortSignal: AbortSignal.timeout(this.timeoutMs) },
      );
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
    this.client.destroy();
  }
}
