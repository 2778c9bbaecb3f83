import type { DynamoDBClient } from "@aws-sdk/client-dynamodb";
import { DescribeTableCommand } from "@aws-sdk/client-dynamodb";
import { InvalidArgumentError } from "@fenced/fence";
import type {
  FencedStore,
  SignalOptions,
  StoreCapabilities,
  StoredRecord,
  TransferOptions,
  WriteOptions,
  WriteResult,
} from "../contract.js";
import { CorruptStateError, StoreSetupError } from "../errors.js";
import { assertKey, type CheckedFence, type Fence, type FenceSet } from "../fence.js";
import { assertJsonValue } from "../json.js";
import { tracedAwsClient } from "../observe.js";
import { probePort } from "../conditional/probe.js";
import { CasCalls, checkedWrite } from "../cas/calls.js";
import { StoreIo } from "../cas/io.js";
import { probeKeyPrefix } from "../cas/layout.js";
import { signalOptions } from "../cas/options.js";
import { dynamoFailures } from "./failures.js";
import { ConditionalItems } from "./items.js";
import { validateOptions, type FencedDynamoOptions } from "./options.js";

export type { FencedDynamoOptions } from "./options.js";

/**
 * Room kept for a manifest's header below an item's limit when put() checks a value before any I/O:
 * the key (up to 512 bytes), its owner and writeIds, and an entry per resource that has owned the
 * key (each up to about 1.7 KB). A header that has outgrown it (many transfers between long resource
 * names) is caught when the manifest is built (../cas/write.ts): InvalidArgumentError, nothing sent.
 */
const HEADER_RESERVE_BYTES = 16 * 1024;

/**
 * Fenced writes of JSON values to DynamoDB: the algorithm of the S3 store (../cas/) over DynamoDB
 * items (items.ts), every value inline in its key's manifest item. A key's manifest and a resource's
 * fence are items written with a condition on their own etag attribute; a write the manifest or the
 * fence does not admit is refused and changes nothing. No transaction is used: register() raises
 * each fence on its own, and putAll() is not offered. See PROTOCOL.md, "DynamoDB".
 */
export class FencedDynamo implements FencedStore<unknown, StoredRecord> {
  /** No transaction: register() raises each fence item on its own. A tombstone is a manifest, ifVersion may name it. */
  readonly capabilities: StoreCapabilities = Object.freeze({ atomicRegister: false, ifVersionMatchesTombstone: true });
  readonly table: string;
  readonly prefix: string;
  private readonly io: StoreIo;
  private readonly items: ConditionalItems;
  private readonly calls: CasCalls;
  /** The largest value put() takes, in bytes of its JSON text. */
  readonly maxValueBytes: number;

  constructor(client: DynamoDBClient, options: FencedDynamoOptions) {
    if (typeof client !== "object" || client === null || typeof (client as { send?: unknown }).send !== "function") {
      throw new InvalidArgumentError("client", "must be a DynamoDBClient from @aws-sdk/client-dynamodb");
    }
    const resolved = validateOptions(options);
    this.table = resolved.table;
    this.prefix = resolved.prefix;
    // Each request a span of its own (../observe.ts); the caller's client is not changed.
    this.items = new ConditionalItems(tracedAwsClient(client, "DynamoDB"), resolved.table, resolved.timeoutMs);
    this.io = new StoreIo(this.items, resolved, dynamoFailures(resolved.table));
    this.calls = new CasCalls(this.io, "dynamodb");
    this.maxValueBytes = this.items.capabilities.maxRecordBytes - HEADER_RESERVE_BYTES;
  }

  /**
   * Proves the table is there with the key the store needs, and that it refuses a stale condition
   * and a create over an existing item; throws StoreSetupError otherwise.
   */
  async verify(options?: SignalOptions): Promise<void> {
    const { signal } = signalOptions(options);
    await this.calls.call("verify", undefined, signal, async (deadline) => {
      const { Table } = await this.items.client.send(new DescribeTableCommand({ TableName: this.table }), { abortSignal: deadline.signal });
      const keys = Table?.KeySchema ?? [];
      const keyType = Table?.AttributeDefinitions?.find((a) => a.AttributeName === "key")?.AttributeType;
      if (keys.length !== 1 || keys[0]?.AttributeName !== "key" || keys[0].KeyType !== "HASH" || keyType !== "S") {
        throw new StoreSetupError(
          "dynamodb",
          "no-such-table",
          `DynamoDB table ${JSON.stringify(this.table)} must have one partition key, "key", a String, and no sort key`,
        );
      }
      await probePort(this.items, "dynamodb", probeKeyPrefix(this.prefix), deadline.signal);
    });
  }

  /**
   * Raises each resource's fence item to its fence (writes no record): from then on a lower token,
   * or the same token from another holder, is refused on every key of the resource. StaleTokenError
   * if a fence item does not admit it; the others are raised or not, each on its own.
   */
  async register(fence: Fence | FenceSet, options?: SignalOptions): Promise<void> {
    await this.calls.register(fence, options);
  }

  /** The resource's fence item as it is now: the highest token registered or written with, and its holder. */
  fence(resource: string, options?: SignalOptions): Promise<CheckedFence | undefined> {
    return this.calls.fence(resource, options);
  }

  /** Writes `value` (JSON) as the key's new version, if the fence and ifVersion are admitted. */
  async put(key: string, value: unknown, options: WriteOptions): Promise<WriteResult> {
    assertKey(key);
    assertJsonValue(value);
    const bytes = Buffer.from(JSON.stringify(value), "utf8");
    if (bytes.length > this.maxValueBytes) {
      throw new InvalidArgumentError(
        "value",
        `is ${bytes.length} bytes of JSON; DynamoDB's item limit leaves a value at most ${this.maxValueBytes}`,
      );
    }
    return this.calls.write("put", key, checkedWrite(options), { kind: "inline", bytes });
  }

  /** Writes a tombstone (the ratchet and the key's owner survive it); get() then reads undefined. */
  async delete(key: string, options: WriteOptions): Promise<WriteResult> {
    assertKey(key);
    return this.calls.write("delete", key, checkedWrite(options), { kind: "tombstone" });
  }

  /** The key's current value and version; undefined if absent or deleted. */
  async get(key: string, options?: SignalOptions): Promise<StoredRecord | undefined> {
    assertKey(key);
    const { signal } = signalOptions(options);
    const found = await this.calls.call("get", key, signal, (deadline) => this.io.readManifest(key, deadline.signal));
    if (found === null) return undefined;
    const { header } = found.snap;
    if (header.body.kind === "tombstone") return undefined;
    if (header.body.kind !== "inline") {
      throw new CorruptStateError(
        "dynamodb",
        "manifest",
        key,
        `the manifest of ${JSON.stringify(key)} names a data object, which this store never writes`,
      );
    }
    const text = (found.inline ?? Buffer.alloc(0)).toString("utf8");
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (err) {
      throw new CorruptStateError("dynamodb", "manifest", key, `the value of ${JSON.stringify(key)} is not JSON`, { cause: err });
    }
    return { value, version: header.writeId, token: BigInt(header.token), holder: header.holder, resource: header.owner };
  }

  /**
   * Hands the key to another resource: one manifest write that requires the key to belong to
   * from.resource, admits both fences (raising both fence items), and records `to` as the writer and
   * to.resource as the owner; the value is unchanged, the version new. Undefined if the key was never
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
}
