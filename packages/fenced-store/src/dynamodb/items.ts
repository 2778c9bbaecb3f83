import { randomBytes } from "node:crypto";
import { DeleteItemCommand, GetItemCommand, PutItemCommand, type DynamoDBClient } from "@aws-sdk/client-dynamodb";
import { requestSignal } from "../deadline.js";
import { CorruptStateError } from "../errors.js";
import { codeOf, retriedRefusal, statusOf } from "../aws/answers.js";
import { neverSent } from "../system-errors.js";
import { sendOnce } from "../aws/sent-once.js";
import type { Condition, ConditionalPort, Failure, PortCapabilities, Revalidated, Stored, WriteOutcome } from "../conditional/port.js";

/**
 * The conditional port (../conditional/port.ts) on DynamoDB items. Each record is one item of the
 * store's table:
 *
 *   key   String, the table's partition key: the record's name (the algorithm's manifest and fence names)
 *   etag  String, 128 random bits in hex, new with every write that lands: the record's version
 *   body  Binary, the record's bytes
 *
 * A write is a PutItem whose ConditionExpression is evaluated on the item itself, atomically with
 * the write: `attribute_not_exists(key)` for ifNoneMatch, `etag = :etag` for ifMatch. The adapter
 * chooses each new ETag itself and sends it in the item, so a write's answer is not needed to know
 * it. DynamoDB has no conditional read: readIfChanged reads the item (strongly consistent) and
 * compares its ETag (capabilities.notModified false). Bodies are inline only: an item is at most
 * 400 KB. No transaction is used (dynalite has none, and no path runs here that its tests cannot).
 */

/** DynamoDB's largest item, its attribute names and values together. */
const MAX_ITEM_BYTES = 400 * 1024;
/** Kept for the rest of an item: a partition key of up to 2,048 bytes (DynamoDB's limit), the ETag and the attribute names. */
const ITEM_RESERVE_BYTES = 2048 + 32 + "key".length + "etag".length + "body".length;

const NAMES = { "#key": "key", "#etag": "etag" } as const;

/** An ETag: 128 random bits, hex; never repeats. */
function newEtag(): string {
  return randomBytes(16).toString("hex");
}

/**
 * Whether a failed request with this status may have been applied: no status at all (no answer), a
 * 5xx (DynamoDB's InternalServerError says the write may have succeeded), or a 2xx whose answer then
 * failed.
 */
function mayHaveLanded(status: number | undefined): boolean {
  return status === undefined || status < 300 || status >= 500;
}

export function classify(err: unknown): Failure {
  if (neverSent(err)) return "unsent";
  if (mayHaveLanded(statusOf(err))) return "ambiguous";
  const code = codeOf(err);
  if (code === "ConditionalCheckFailedException") return "precondition";
  if (code === "TransactionConflictException") return "conflict";
  // ProvisionedThroughputExceededException, ThrottlingException, RequestLimitExceeded: refused before applied.
  if (retriedRefusal(err)) return "throttled";
  return "fatal";
}

export class ConditionalItems implements ConditionalPort {
  readonly capabilities: PortCapabilities = Object.freeze({
    notModified: false,
    dataObjects: false,
    maxRecordBytes: MAX_ITEM_BYTES - ITEM_RESERVE_BYTES,
  });

  constructor(
    readonly client: DynamoDBClient,
    readonly table: string,
    /** The bound on a request sent without a call's signal (cleanup, the probe's own records). */
    private readonly timeoutMs: number,
  ) {}

  /** Every request is bounded: by the call's deadline, or on its own. */
  private bounded(signal: AbortSignal | undefined): { abortSignal: AbortSignal } {
    return { abortSignal: signal ?? requestSignal(this.timeoutMs) };
  }

  async read(key: string, signal?: AbortSignal): Promise<Stored | undefined> {
    const command = new GetItemCommand({ TableName: this.table, Key: { key: { S: key } }, ConsistentRead: true });
    const { Item } = await this.client.send(command, this.bounded(signal));
    if (Item === undefined) return undefined;
    const etag = Item.etag?.S;
    const body = Item.body?.B;
    if (etag === undefined || body === undefined) {
      throw new CorruptStateError("dynamodb", "record", key, `item ${JSON.stringify(key)} of table ${this.table} has no etag or no body`);
    }
    return { etag, body: Buffer.from(body) };
  }

  /** No conditional read on DynamoDB: the item as it is now, "unchanged" if its ETag is still `etag`. */
  async readIfChanged(key: string, etag: string, signal?: AbortSignal): Promise<Revalidated> {
    const object = await this.read(key, signal);
    return object?.etag === etag ? { unchanged: true } : { unchanged: false, object };
  }

  /** Never throws: the outcome says how a failure is to be understood. */
  async write(key: string, body: Buffer, condition: Condition, signal?: AbortSignal): Promise<WriteOutcome> {
    const etag = newEtag();
    try {
      const command = new PutItemCommand({
        TableName: this.table,
        Item: { key: { S: key }, etag: { S: etag }, body: { B: body } },
        ...("ifMatch" in condition
          ? {
              ConditionExpression: "#etag = :etag",
              ExpressionAttributeNames: { "#etag": NAMES["#etag"] },
              ExpressionAttributeValues: { ":etag": { S: condition.ifMatch } },
            }
          : { ConditionExpression: "attribute_not_exists(#key)", ExpressionAttributeNames: { "#key": NAMES["#key"] } }),
      });
      // Once, at once, never again by the SDK, on connections of the store's own (../aws/sent-once.ts).
      await sendOnce(this.client, command, (options) => this.client.send(command, options), this.bounded(signal));
      return { ok: true, etag };
    } catch (err) {
      return { ok: false, failure: classify(err), error: err };
    }
  }

  async remove(key: string, signal?: AbortSignal): Promise<void> {
    await this.client.send(new DeleteItemCommand({ TableName: this.table, Key: { key: { S: key } } }), this.bounded(signal));
  }

  /** One spelling of an ETag only: a refusal of the current one is never the spelling's fault. */
  noteRefusedOwnEtag(): boolean {
    return false;
  }
}
