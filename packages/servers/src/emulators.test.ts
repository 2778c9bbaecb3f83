import { GetItemCommand, PutItemCommand, TransactWriteItemsCommand } from "@aws-sdk/client-dynamodb";
import { setTimeout as sleep } from "node:timers/promises";
import { BlobServiceClient, newPipeline, StorageSharedKeyCredential } from "@azure/storage-blob";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startAzureBlob, type StartedAzureBlob } from "./azure-blob.js";
import { startDynamo, type StartedDynamo } from "./dynamodb.js";

/**
 * The two emulators the next stores are built on, each checked for the one primitive such a store
 * needs (a write that lands only if the record is absent or still as it was read) and for the faults
 * a store's tests apply: a paused process answers nothing, a killed one refuses, a restarted one
 * has its data. A request to a paused emulator is given this long before it counts as unanswered.
 */
const SILENT_MS = 500;
/** Longer than azurite keeps an idle connection open: 6 s (Node's keep-alive timeout of 5 s and its 1 s buffer). */
const PAST_KEEP_ALIVE_MS = 7_000;

const nameOf = (err: unknown): string | undefined => (err instanceof Error ? err.name : undefined);
const statusOf = (err: unknown): number | undefined => (err as { statusCode?: number }).statusCode;
const codeOf = (err: unknown): string | undefined => (err as { code?: string }).code;

describe("startDynamo (dynalite)", () => {
  let dynamo: StartedDynamo;
  let table: string;
  beforeAll(async () => {
    dynamo = await startDynamo();
    table = await dynamo.createTable(undefined, "k");
  }, 60_000);
  afterAll(() => dynamo?.stop());

  const put = (key: string, token: number) =>
    dynamo.client().send(
      new PutItemCommand({
        TableName: table,
        Item: { k: { S: key }, token: { N: String(token) } },
        ConditionExpression: "attribute_not_exists(k) OR #t <= :t",
        ExpressionAttributeNames: { "#t": "token" },
        ExpressionAttributeValues: { ":t": { N: String(token) } },
      }),
    );
  const tokenOf = async (key: string): Promise<string | undefined> =>
    (await dynamo.client().send(new GetItemCommand({ TableName: table, Key: { k: { S: key } }, ConsistentRead: true }))).Item?.token?.N;

  it("a conditional PutItem: a write whose condition fails is refused with ConditionalCheckFailedException, and nothing changes", async () => {
    await put("a", 5);
    await expect(put("a", 3)).rejects.toSatisfy((err) => nameOf(err) === "ConditionalCheckFailedException");
    expect(await tokenOf("a")).toBe("5");
    await put("a", 7);
    expect(await tokenOf("a")).toBe("7");
  });

  it("has no transactions: TransactWriteItems is refused as an unknown operation, so no store may use it", async () => {
    const transact = dynamo
      .client()
      .send(new TransactWriteItemsCommand({ TransactItems: [{ Put: { TableName: table, Item: { k: { S: "t" }, token: { N: "1" } } } }] }));
    await expect(transact).rejects.toSatisfy((err) => nameOf(err) === "UnknownOperationException");
    expect(await tokenOf("t")).toBeUndefined();
  });

  it("faults: paused it answers nothing, killed it refuses, restarted it answers on its port with its items", async () => {
    await put("kept", 9);
    dynamo.faults.pause();
    try {
      const silent = dynamo.client().send(new GetItemCommand({ TableName: table, Key: { k: { S: "kept" } } }), {
        abortSignal: AbortSignal.timeout(SILENT_MS),
      });
      await expect(silent).rejects.toSatisfy((err) => nameOf(err) === "AbortError" || nameOf(err) === "TimeoutError");
    } finally {
      dynamo.faults.resume();
    }
    expect(await tokenOf("kept")).toBe("9");
    await dynamo.faults.kill();
    expect(dynamo.faults.running).toBe(false);
    await expect(fetch(dynamo.endpoint)).rejects.toSatisfy((err) => codeOf((err as { cause?: unknown }).cause) === "ECONNREFUSED");
    await dynamo.faults.restart();
    expect(await tokenOf("kept")).toBe("9");
  }, 60_000);
});

describe("startAzureBlob (azurite)", () => {
  let azure: StartedAzureBlob;
  let container: string;
  beforeAll(async () => {
    azure = await startAzureBlob();
    container = await azure.createContainer();
  }, 120_000);
  afterAll(() => azure?.stop());

  const blob = (name: string) => azure.client().getContainerClient(container).getBlockBlobClient(name);
  /** Tags compare as strings: tokens are written at the width of 2^63 − 1. */
  const tag = (token: number): string => String(token).padStart(19, "0");
  const text = async (name: string): Promise<string> => (await blob(name).downloadToBuffer()).toString("utf8");

  it("If-None-Match: * creates once; a stale If-Match and a failed tag condition are each refused 412 ConditionNotMet, and nothing changes", async () => {
    const created = await blob("a").upload("v5", 2, { conditions: { ifNoneMatch: "*" }, tags: { token: tag(5) } });
    const refused = (err: unknown): boolean => statusOf(err) === 412 && codeOf(err) === "ConditionNotMet";
    await expect(blob("a").upload("again", 5, { conditions: { ifNoneMatch: "*" } })).rejects.toSatisfy(
      (err) => statusOf(err) === 409 || refused(err),
    );
    await expect(
      blob("a").upload("v3", 2, { conditions: { tagConditions: `"token" <= '${tag(3)}'` }, tags: { token: tag(3) } }),
    ).rejects.toSatisfy(refused);
    await expect(blob("a").upload("stale", 5, { conditions: { ifMatch: '"0x0"' } })).rejects.toSatisfy(refused);
    expect(await text("a")).toBe("v5");
    await blob("a").upload("v7", 2, {
      conditions: { ifMatch: created.etag ?? "", tagConditions: `"token" <= '${tag(7)}'` },
      tags: { token: tag(7) },
    });
    expect(await text("a")).toBe("v7");
  });

  it("faults: paused it answers nothing, killed it refuses, restarted it answers on its port with the blobs it had saved, and a SIGKILL loses the rest", async () => {
    await blob("kept").upload("here", 4);
    await azure.saved();
    azure.faults.pause();
    try {
      await expect(blob("kept").downloadToBuffer(undefined, undefined, { abortSignal: AbortSignal.timeout(SILENT_MS) })).rejects.toSatisfy(
        (err) => nameOf(err) === "AbortError" || nameOf(err) === "TimeoutError",
      );
    } finally {
      azure.faults.resume();
    }
    await azure.settled();
    expect(await text("kept")).toBe("here");
    // Answered, not yet saved (saved() returned just after a save, and the next is 5 s after it): a
    // store's fault test must not read this loss as the store's.
    await blob("unsaved").upload("lost", 4);
    await azure.faults.kill();
    expect(azure.faults.running).toBe(false);
    await expect(fetch(azure.url)).rejects.toSatisfy((err) => codeOf((err as { cause?: unknown }).cause) === "ECONNREFUSED");
    await azure.faults.restart();
    expect(await text("kept")).toBe("here");
    expect(await blob("unsaved").exists()).toBe(false);
  }, 120_000);

  it("settled(): after a pause past azurite's keep-alive timeout, a request sent once on a pooled connection left idle across the pause is answered", async () => {
    // Sent once, as the stores send: the SDK's default retry would hide a reset.
    const oneTry = () =>
      new BlobServiceClient(
        azure.url,
        newPipeline(new StorageSharedKeyCredential(azure.accountName, azure.accountKey), { retryOptions: { maxTries: 1 } }),
      )
        .getContainerClient(container)
        .getBlockBlobClient("idle");
    await oneTry().upload("here", 4);
    // Connections left idle in the SDK's pool, which every client of the process shares.
    await Promise.all([oneTry().exists(), oneTry().exists()]);
    azure.faults.pause();
    try {
      await sleep(PAST_KEEP_ALIVE_MS);
    } finally {
      azure.faults.resume();
    }
    // Without it, the read below, sent right after the resume, is reset (ECONNRESET).
    await azure.settled();
    expect(await oneTry().exists()).toBe(true);
  }, 60_000);
});
