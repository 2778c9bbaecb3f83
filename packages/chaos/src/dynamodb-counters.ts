import { DynamoDBClient, GetItemCommand, PutItemCommand } from "@aws-sdk/client-dynamodb";
import type { Fence } from "@fenced/fence";
import { FencedDynamo } from "@fenced/store/dynamodb";
import { INITIAL, plainKey } from "./counter-keys.js";
import type { CounterStore, CounterStoreOptions, StoreConnection, WriteLease } from "./counter-store.js";
import { EMPTY_DOC, parseDoc, type CounterDoc, type Mode } from "./history.js";

/**
 * The counter documents in a DynamoDB table (dynalite), as S3Counters keeps them in a bucket:
 * - unfenced: a plain PutItem / a strongly consistent GetItem of an item of its own (`plain/<key>.json`,
 *   its document as JSON in a String attribute), beside FencedDynamo's prefix and never read by it;
 * - ratchet and full: FencedDynamo's put() and get() of the document as a JSON value.
 * No transaction: no writeAll, so a pair's counters are written one by one, each under its own fence.
 */
export class DynamoCounters implements CounterStore {
  private readonly client: DynamoDBClient;
  private readonly store: FencedDynamo;
  private readonly table: string;
  private readonly timeoutMs: number;

  constructor(
    connection: Extract<StoreConnection, { backend: "dynamodb" }>,
    private readonly mode: Mode,
    { timeoutMs }: CounterStoreOptions,
  ) {
    this.timeoutMs = timeoutMs;
    this.table = connection.table;
    this.client = new DynamoDBClient({
      endpoint: connection.endpoint,
      region: connection.region,
      credentials: { accessKeyId: connection.accessKeyId, secretAccessKey: connection.secretAccessKey },
    });
    this.store = new FencedDynamo(this.client, { table: connection.table, timeoutMs });
  }

  async read(key: string): Promise<{ doc: CounterDoc; version: string | undefined }> {
    if (this.mode === "unfenced") {
      const { Item } = await this.client.send(
        new GetItemCommand({ TableName: this.table, Key: { key: { S: plainKey(key) } }, ConsistentRead: true }),
        { abortSignal: AbortSignal.timeout(this.timeoutMs) },
      );
      const text = Item?.doc?.S;
      if (text === undefined) throw new Error(`counter ${key} does not exist`);
      return { doc: parseDoc(JSON.parse(text)), version: undefined };
    }
    // get() is a strongly consistent read in every mode: reads are never fenced.
    const record = await this.store.get(key);
    if (record === undefined) throw new Error(`counter ${key} does not exist`);
    return { doc: parseDoc(record.value), version: record.version };
  }

  async write(key: string, doc: CounterDoc, { fence }: WriteLease, version: string | undefined): Promise<void> {
    const value = { count: doc.count, log: [...doc.log] };
    if (this.mode === "unfenced") {
      await this.client.send(
        new PutItemCommand({ TableName: this.table, Item: { key: { S: plainKey(key) }, doc: { S: JSON.stringify(value) } } }),
        { abortSignal: AbortSignal.timeout(this.timeoutMs) },
      );
      return;
    }
    await this.store.put(key, value, this.mode === "full" && version !== undefined ? { fence, ifVersion: version } : { fence });
  }

  async register(fence: Fence | readonly Fence[]): Promise<void> {
    await this.store.register(fence);
  }

  async init(keys: readonly { key: string; resource: string }[]): Promise<void> {
    for (const { key, resource } of keys) {
      if (this.mode === "unfenced") await this.write(key, EMPTY_DOC, { fence: INITIAL(resource), credential: undefined }, undefined);
      else await this.store.put(key, { count: 0, log: [] }, { fence: INITIAL(resource) });
    }
  }

  async close(): Promise<void> {
    await this.store.flush();
    this.client.destroy();
  }
}
