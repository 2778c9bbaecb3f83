import { setTimeout } from "node:timers/promises";
import { CreateTableCommand, DescribeTableCommand, DynamoDBClient, GetItemCommand, PutItemCommand } from "@aws-sdk/client-dynamodb";
import { GetObjectCommand, NoSuchKey, PutObjectCommand, S3Client } from "@aws-sdk/client-s3";
import { BlobServiceClient, RestError, StorageSharedKeyCredential, type ContainerClient } from "@azure/storage-blob";
import pg from "pg";
import type { Fence } from "@fenced/fence";
import {
  StaleTokenError,
  VersionMismatchError,
  type FencedStore,
  type StoredVersion,
  type WriteOptions as StoreWriteOptions,
  type WriteResult,
} from "@fenced/store";
import { FencedAzureBlob } from "@fenced/store/azure-blob";
import { FencedDynamo } from "@fenced/store/dynamodb";
import { FencedPostgres } from "@fenced/store/postgres";
import { FencedS3 } from "@fenced/store/s3";

export type BackendName = "s3" | "postgres" | "dynamodb" | "azure-blob";
export const BACKENDS: readonly BackendName[] = ["s3", "postgres", "dynamodb", "azure-blob"];

/** How the narration and the pictures name each backend. */
export const BACKEND_TITLES: Readonly<Record<BackendName, string>> = {
  s3: "S3",
  postgres: "Postgres",
  dynamodb: "DynamoDB",
  "azure-blob": "Azure Blob",
};

/**
 * Everything a client needs to reach a backend. Plain data: it travels over IPC to the paused
 * client's process, which opens its own connections (a separate process shares nothing).
 */
export type BackendConfig =
  | {
      readonly kind: "s3";
      readonly endpoint: string;
      readonly region: string;
      readonly accessKeyId: string;
      readonly secretAccessKey: string;
      readonly bucket: string;
      /** Plain objects live here; FencedS3 keeps its manifests under its own prefix beside them. */
      readonly prefix: string;
    }
  | { readonly kind: "postgres"; readonly url: string; readonly schema: string }
  | {
      readonly kind: "dynamodb";
      readonly endpoint: string;
      readonly region: string;
      readonly accessKeyId: string;
      readonly secretAccessKey: string;
      /** One table (partition key `key`, a String): plain items under `prefix`, FencedDynamo's under its own prefix beside them. */
      readonly table: string;
      readonly prefix: string;
    }
  | {
      readonly kind: "azure-blob";
      /** The account's URL (azurite serves accounts path-style: http://127.0.0.1:port/devstoreaccount1). */
      readonly url: string;
      readonly accountName: string;
      readonly accountKey: string;
      /** Plain blobs live here; FencedAzureBlob keeps its manifests under its own prefix beside them. */
      readonly container: string;
      readonly prefix: string;
    };

/** The "file" every scenario edits: each client appends one entry, so a lost update is a missing entry. */
export interface FileDoc {
  readonly entries: readonly string[];
}

export interface ReadResult {
  readonly doc: FileDoc;
  /** The version a fenced store reports (for ifVersion); undefined for plain reads. */
  readonly version: string | undefined;
}

export type RefusalName = "StaleTokenError" | "VersionMismatchError";

/** Why the storage refused a write, in plain data (tokens as decimal strings, as in the JSON output). */
export interface Refusal {
  readonly error: RefusalName;
  readonly message: string;
  readonly token?: string;
  readonly highest?: string;
  readonly expected?: string;
  readonly actual?: string;
}

export type WriteOutcome =
  { readonly accepted: true; readonly version: string | undefined } | { readonly accepted: false; readonly refusal: Refusal };

interface WriteOptions {
  readonly fence: Fence;
  readonly ifVersion?: string | undefined;
}

/**
 * One client's view of the storage. The unfenced variant is what most code does today (a plain
 * PutObject, a plain UPDATE, a plain PutItem, a plain upload of the blob); it ignores the fence.
 * The fenced one hands the lease to a store of the contract (ContractStore: FencedS3, FencedPostgres,
 * FencedDynamo or FencedAzureBlob). Refusals come back as values; any other failure throws, since it is a real error.
 */
export interface DemoStore {
  readonly fenced: boolean;
  read(key: string): Promise<ReadResult>;
  write(key: string, doc: FileDoc, options: WriteOptions): Promise<WriteOutcome>;
  /** Fence-on-acquire: only a fenced store can do it. */
  register(fence: Fence): Promise<WriteOutcome>;
  close(): Promise<void>;
}

export function openStore(config: BackendConfig, fenced: boolean): DemoStore {
  if (config.kind === "s3") return fenced ? fencedS3(config) : new PlainS3Store(config);
  if (config.kind === "dynamodb") return fenced ? fencedDynamo(config) : new PlainDynamoStore(config);
  if (config.kind === "azure-blob") return fenced ? fencedAzureBlob(config) : new PlainAzureBlobStore(config);
  return fenced ? fencedPostgres(config) : new PlainPgStore(config);
}

/**
 * Storage a store opened by openStore expects: the bucket exists; the table exists; the container
 * exists; the schema, tables and sequence exist. The bucket and the container are made by whoever
 * starts their server (servers.ts).
 */
export async function prepareBackend(config: BackendConfig): Promise<void> {
  if (config.kind === "s3" || config.kind === "azure-blob") return;
  if (config.kind === "dynamodb") {
    const client = dynamoClient(config);
    try {
      await client.send(
        new CreateTableCommand({
          TableName: config.table,
          AttributeDefinitions: [{ AttributeName: "key", AttributeType: "S" }],
          KeySchema: [{ AttributeName: "key", KeyType: "HASH" }],
          BillingMode: "PAY_PER_REQUEST",
        }),
      );
      // DynamoDB answers CreateTable while the table is CREATING; it is usable once ACTIVE.
      for (const until = Date.now() + 30_000; ; await setTimeout(20)) {
        const { Table } = await client.send(new DescribeTableCommand({ TableName: config.table }));
        if (Table?.TableStatus === "ACTIVE") break;
        if (Date.now() > until) throw new Error(`DynamoDB table ${config.table} is not ACTIVE after 30 s`);
      }
    } finally {
      client.destroy();
    }
    return;
  }
  const pool = new pg.Pool({ connectionString: config.url, max: 1 });
  try {
    await pool.query(`CREATE SCHEMA IF NOT EXISTS ${quoteIdent(config.schema)}`);
    await pool.query(`CREATE TABLE IF NOT EXISTS ${plainTable(config.schema)} (key text PRIMARY KEY, doc jsonb NOT NULL)`);
    await new FencedPostgres(pool, { schema: config.schema }).migrate();
  } finally {
    await pool.end();
  }
}

export function dynamoClient(config: Extract<BackendConfig, { kind: "dynamodb" }>): DynamoDBClient {
  return new DynamoDBClient({
    endpoint: config.endpoint,
    region: config.region,
    credentials: { accessKeyId: config.accessKeyId, secretAccessKey: config.secretAccessKey },
  });
}

/** A client of the config's container, signed with the account's shared key. */
export function azureContainer(config: Extract<BackendConfig, { kind: "azure-blob" }>): ContainerClient {
  const credential = new StorageSharedKeyCredential(config.accountName, config.accountKey);
  return new BlobServiceClient(config.url, credential).getContainerClient(config.container);
}

/** Removes what prepareBackend made, for servers the demo does not own (its own servers vanish whole). */
export async function dropBackend(config: BackendConfig): Promise<void> {
  if (config.kind !== "postgres") return;
  const pool = new pg.Pool({ connectionString: config.url, max: 1 });
  try {
    await pool.query(`DROP SCHEMA IF EXISTS ${quoteIdent(config.schema)} CASCADE`);
  } finally {
    await pool.end();
  }
}

export function s3Client(config: Extract<BackendConfig, { kind: "s3" }>): S3Client {
  return new S3Client({
    endpoint: config.endpoint,
    region: config.region,
    credentials: { accessKeyId: config.accessKeyId, secretAccessKey: config.secretAccessKey },
    forcePathStyle: true,
    // radosgw answers 411 to the SDK's default streaming checksums; see @fenced/servers.
    requestChecksumCalculation: "WHEN_REQUIRED",
    responseChecksumValidation: "WHEN_REQUIRED",
  });
}

function refusalOf(err: unknown): Refusal | undefined {
  if (err instanceof StaleTokenError) {
    return { error: "StaleTokenError", message: err.message, token: err.token.toString(), highest: err.highest.toString() };
  }
  if (err instanceof VersionMismatchError) {
    return {
      error: "VersionMismatchError",
      message: err.message,
      expected: err.expected,
      ...(err.actual === undefined ? {} : { actual: err.actual }),
    };
  }
  return undefined;
}

async function refusedOr<T extends WriteOutcome>(write: () => Promise<T>): Promise<WriteOutcome> {
  try {
    return await write();
  } catch (err) {
    const refusal = refusalOf(err);
    if (refusal === undefined) throw err;
    return { accepted: false, refusal };
  }
}

function parseDoc(text: string): FileDoc {
  const value = JSON.parse(text) as unknown;
  if (typeof value !== "object" || value === null || !Array.isArray((value as { entries?: unknown }).entries)) {
    throw new Error(`the file does not hold a demo document: ${text.slice(0, 200)}`);
  }
  return { entries: (value as { entries: unknown[] }).entries.map(String) };
}

const EMPTY: ReadResult = { doc: { entries: [] }, version: undefined };

class PlainS3Store implements DemoStore {
  readonly fenced = false;
  private readonly client: S3Client;
  constructor(private readonly config: Extract<BackendConfig, { kind: "s3" }>) {
    this.client = s3Client(config);
  }
  async read(key: string): Promise<ReadResult> {
    try {
      const res = await this.client.send(new GetObjectCommand({ Bucket: this.config.bucket, Key: this.config.prefix + key }));
      return { doc: parseDoc((await res.Body?.transformToString("utf8")) ?? ""), version: undefined };
    } catch (err) {
      if (err instanceof NoSuchKey) return EMPTY;
      throw err;
    }
  }
  async write(key: string, doc: FileDoc): Promise<WriteOutcome> {
    // The everyday write: last writer wins, whoever it is and whatever it read.
    await this.client.send(
      new PutObjectCommand({
        Bucket: this.config.bucket,
        Key: this.config.prefix + key,
        Body: JSON.stringify(doc),
        ContentType: "application/json",
      }),
    );
    return { accepted: true, version: undefined };
  }
  register(): Promise<WriteOutcome> {
    return Promise.reject(new Error("an unfenced store has nothing to register a token with"));
  }
  close(): Promise<void> {
    this.client.destroy();
    return Promise.resolve();
  }
}

class PlainDynamoStore implements DemoStore {
  readonly fenced = false;
  private readonly client: DynamoDBClient;
  constructor(private readonly config: Extract<BackendConfig, { kind: "dynamodb" }>) {
    this.client = dynamoClient(config);
  }
  async read(key: string): Promise<ReadResult> {
    const { Item } = await this.client.send(
      new GetItemCommand({ TableName: this.config.table, Key: { key: { S: this.config.prefix + key } }, ConsistentRead: true }),
    );
    return Item?.doc?.S === undefined ? EMPTY : { doc: parseDoc(Item.doc.S), version: undefined };
  }
  async write(key: string, doc: FileDoc): Promise<WriteOutcome> {
    // The everyday write: last writer wins, whoever it is and whatever it read.
    await this.client.send(
      new PutItemCommand({ TableName: this.config.table, Item: { key: { S: this.config.prefix + key }, doc: { S: JSON.stringify(doc) } } }),
    );
    return { accepted: true, version: undefined };
  }
  register(): Promise<WriteOutcome> {
    return Promise.reject(new Error("an unfenced store has nothing to register a token with"));
  }
  close(): Promise<void> {
    this.client.destroy();
    return Promise.resolve();
  }
}

class PlainAzureBlobStore implements DemoStore {
  readonly fenced = false;
  private readonly container: ContainerClient;
  constructor(private readonly config: Extract<BackendConfig, { kind: "azure-blob" }>) {
    this.container = azureContainer(config);
  }
  async read(key: string): Promise<ReadResult> {
    try {
      const bytes = await this.container.getBlockBlobClient(this.config.prefix + key).downloadToBuffer();
      return { doc: parseDoc(bytes.toString("utf8")), version: undefined };
    } catch (err) {
      if (err instanceof RestError && err.statusCode === 404 && err.code === "BlobNotFound") return EMPTY;
      throw err;
    }
  }
  async write(key: string, doc: FileDoc): Promise<WriteOutcome> {
    // The everyday write: last writer wins, whoever it is and whatever it read.
    const body = JSON.stringify(doc);
    await this.container
      .getBlockBlobClient(this.config.prefix + key)
      .upload(body, Buffer.byteLength(body), { blobHTTPHeaders: { blobContentType: "application/json" } });
    return { accepted: true, version: undefined };
  }
  register(): Promise<WriteOutcome> {
    return Promise.reject(new Error("an unfenced store has nothing to register a token with"));
  }
  close(): Promise<void> {
    // The SDK's clients hold nothing to close.
    return Promise.resolve();
  }
}

class PlainPgStore implements DemoStore {
  readonly fenced = false;
  private readonly pool: pg.Pool;
  constructor(private readonly config: Extract<BackendConfig, { kind: "postgres" }>) {
    this.pool = new pg.Pool({ connectionString: config.url, max: 2 });
  }
  async read(key: string): Promise<ReadResult> {
    const { rows } = await this.pool.query<{ doc: FileDoc }>(`SELECT doc FROM ${plainTable(this.config.schema)} WHERE key = $1`, [key]);
    const row = rows[0];
    return row === undefined ? EMPTY : { doc: { entries: row.doc.entries.map(String) }, version: undefined };
  }
  async write(key: string, doc: FileDoc): Promise<WriteOutcome> {
    const table = plainTable(this.config.schema);
    const json = JSON.stringify(doc);
    // A plain UPDATE, as most code does it; the INSERT only creates the file the first time.
    const updated = await this.pool.query(`UPDATE ${table} SET doc = $2 WHERE key = $1`, [key, json]);
    if (updated.rowCount === 0) await this.pool.query(`INSERT INTO ${table} (key, doc) VALUES ($1, $2)`, [key, json]);
    return { accepted: true, version: undefined };
  }
  register(): Promise<WriteOutcome> {
    return Promise.reject(new Error("an unfenced store has nothing to register a token with"));
  }
  close(): Promise<void> {
    return this.pool.end();
  }
}

/**
 * A fenced store, whichever: the demo reads and writes through the store contract (@fenced/store),
 * the file as the store's value (`encode`), read back from what the store's get() answers (`decode`).
 */
class ContractStore<V, R extends StoredVersion> implements DemoStore {
  readonly fenced = true;
  constructor(
    private readonly store: FencedStore<V, R>,
    /** The store's put(), with what its writes carry beside the fence and ifVersion (the objects' content type). */
    private readonly put: (key: string, value: V, options: StoreWriteOptions) => Promise<WriteResult>,
    private readonly encode: (doc: FileDoc) => V,
    private readonly decode: (read: R) => Promise<FileDoc>,
    readonly close: () => Promise<void>,
  ) {}
  async read(key: string): Promise<ReadResult> {
    const found = await this.store.get(key);
    return found === undefined ? EMPTY : { doc: await this.decode(found), version: found.version };
  }
  write(key: string, doc: FileDoc, options: WriteOptions): Promise<WriteOutcome> {
    return refusedOr(async () => {
      const res = await this.put(key, this.encode(doc), {
        fence: options.fence,
        ...(options.ifVersion === undefined ? {} : { ifVersion: options.ifVersion }),
      });
      return { accepted: true, version: res.version };
    });
  }
  register(fence: Fence): Promise<WriteOutcome> {
    return refusedOr(async () => {
      await this.store.register(fence);
      return { accepted: true, version: undefined };
    });
  }
}

/** The bucket's fenced store: the file as JSON bytes. */
function fencedS3(config: Extract<BackendConfig, { kind: "s3" }>): DemoStore {
  const client = s3Client(config);
  const store = new FencedS3(client, { bucket: config.bucket, prefix: `${config.prefix}fenced/` });
  return new ContractStore(
    store,
    (key, value, options) => store.put(key, value, { ...options, contentType: "application/json" }),
    (doc) => Buffer.from(JSON.stringify(doc)),
    async (read) => parseDoc(Buffer.concat(await read.body.toArray()).toString("utf8")),
    async () => {
      await store.flush();
      client.destroy();
    },
  );
}

/** The table's fenced store: the file as a JSON value, inline in its key's manifest item. */
function fencedDynamo(config: Extract<BackendConfig, { kind: "dynamodb" }>): DemoStore {
  const client = dynamoClient(config);
  const store = new FencedDynamo(client, { table: config.table, prefix: `${config.prefix}fenced/` });
  return new ContractStore(
    store,
    (key, value, options) => store.put(key, value, options),
    (doc) => ({ entries: [...doc.entries] }),
    (read) => Promise.resolve({ entries: (read.value as FileDoc).entries.map(String) }),
    () => {
      client.destroy();
      return Promise.resolve();
    },
  );
}

/** The container's fenced store: the file as JSON bytes, inside its key's manifest blob. */
function fencedAzureBlob(config: Extract<BackendConfig, { kind: "azure-blob" }>): DemoStore {
  const store = new FencedAzureBlob(azureContainer(config), { prefix: `${config.prefix}fenced/` });
  return new ContractStore(
    store,
    (key, value, options) => store.put(key, value, { ...options, contentType: "application/json" }),
    (doc) => Buffer.from(JSON.stringify(doc)),
    async (read) => parseDoc(Buffer.concat(await read.body.toArray()).toString("utf8")),
    () => store.flush(),
  );
}

/** The database's fenced store: the file as a JSON record. */
function fencedPostgres(config: Extract<BackendConfig, { kind: "postgres" }>): DemoStore {
  const pool = new pg.Pool({ connectionString: config.url, max: 2 });
  const store = new FencedPostgres(pool, { schema: config.schema });
  return new ContractStore(
    store,
    (key, value, options) => store.put(key, value, options),
    (doc) => ({ entries: [...doc.entries] }),
    (read) => Promise.resolve({ entries: (read.value as FileDoc).entries.map(String) }),
    () => pool.end(),
  );
}

function quoteIdent(name: string): string {
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(name)) throw new RangeError(`not a schema name the demo makes: ${JSON.stringify(name)}`);
  return `"${name}"`;
}

function plainTable(schema: string): string {
  return `${quoteIdent(schema)}.plain_files`;
}
