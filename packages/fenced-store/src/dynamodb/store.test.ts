import { randomBytes } from "node:crypto";
import type { DynamoDBClient } from "@aws-sdk/client-dynamodb";
import { startDynamo, type StartedDynamo } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InvalidArgumentError } from "@fenced/fence";
import { OutcomeUnknownError, StaleTokenError, StoreSetupError, StoreUnavailableError } from "../errors.js";
import type { Fence } from "../fence.js";
import { FencedDynamo } from "./store.js";

/**
 * FencedDynamo on dynalite, beyond the conformance suite (conformance/servers.test.ts): its set-up
 * checks, its one limit (an item's 400 KB), and each fault of the DynamoDB process ending a call
 * with a typed error within its deadline.
 */
let dynamo: StartedDynamo;
let client: DynamoDBClient;

async function newStore(options: { timeoutMs?: number } = {}): Promise<FencedDynamo> {
  const table = await dynamo.createTable();
  return new FencedDynamo(client, { table, ...options });
}

/** The table the fault tests share, created (and ACTIVE) once, before any of them kills the process. */
let faultTable: string;

beforeAll(async () => {
  dynamo = await startDynamo();
  client = dynamo.client();
  faultTable = await dynamo.createTable();
}, 60_000);
afterAll(() => dynamo?.stop());

const fence = (token: number, holder = "h"): Fence => ({ resource: "reports", token: BigInt(token), holder });
const key = (): string => `reports/${randomBytes(6).toString("hex")}`;

describe("FencedDynamo's set-up", () => {
  it("verify() passes on a table keyed as the store needs, and names what is wrong with any other", async () => {
    await (await newStore()).verify();
    const other = await dynamo.createTable(undefined, "id");
    await expect(new FencedDynamo(client, { table: other }).verify()).rejects.toMatchObject({
      name: "StoreSetupError",
      backend: "dynamodb",
      problem: "no-such-table",
    });
  });

  it("a missing table: every call is a StoreSetupError naming it, and nothing is written", async () => {
    const store = new FencedDynamo(client, { table: "never-created" });
    const err = await store.put(key(), { a: 1 }, { fence: fence(1) }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StoreSetupError);
    expect(err).toMatchObject({ backend: "dynamodb", problem: "no-such-table", applied: "no" });
    await expect(store.verify()).rejects.toBeInstanceOf(StoreSetupError);
  });

  it("refuses a value past an item's limit before any I/O, with the limit in the error; one at the limit lands", async () => {
    const store = await newStore();
    const k = key();
    const over = "x".repeat(store.maxValueBytes); // its JSON text is two quotes longer
    await expect(store.put(k, over, { fence: fence(1) })).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(await store.get(k)).toBeUndefined();
    const at = "x".repeat(store.maxValueBytes - 2);
    await store.put(k, at, { fence: fence(1) });
    expect((await store.get(k))?.value).toBe(at);
  });
});

describe("FencedDynamo's item limit, once the manifest header has grown", () => {
  it("refuses a value whose manifest would pass an item's limit with InvalidArgumentError, sending nothing, after transfers between long resource names", async () => {
    const store = await newStore();
    const k = key();
    // 512 three-byte characters each: about 1.6 KB a ratchet entry, one more entry per new owner.
    const resources = Array.from({ length: 12 }, (_, i) => `${i}`.padEnd(512, "€"));
    const at = (i: number): Fence => ({ resource: resources[i] as string, token: 1n, holder: "h" });
    await store.put(k, "small", { fence: at(0) });
    for (let i = 1; i < resources.length; i++) await store.transfer(k, { from: at(i - 1), to: at(i) });
    const before = await store.get(k);
    // Under the check put() makes before any I/O, over what the grown header leaves.
    const value = "x".repeat(store.maxValueBytes - 2);
    const err = await store.put(k, value, { fence: at(resources.length - 1) }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(await store.get(k)).toEqual(before);
  });
});

describe("FencedDynamo under faults of the DynamoDB process", () => {
  /** dynalite answers a write in a few ms here; a paused one is given this long per call. */
  const TIMEOUT_MS = 500;

  it("paused: a put ends by its deadline, typed (OutcomeUnknownError once a manifest write was sent, else StoreUnavailableError); resumed, the ratchet holds", async () => {
    const store = new FencedDynamo(client, { table: faultTable, timeoutMs: TIMEOUT_MS });
    const k = key();
    await store.put(k, "v1", { fence: fence(1) });
    dynamo.faults.pause();
    let err: unknown;
    const started = performance.now();
    try {
      err = await store.put(k, "v2", { fence: fence(2) }).catch((e: unknown) => e);
    } finally {
      dynamo.faults.resume();
    }
    expect(performance.now() - started).toBeLessThan(TIMEOUT_MS * 4);
    expect(err instanceof OutcomeUnknownError || err instanceof StoreUnavailableError, String(err)).toBe(true);
    // Whatever became of it, the first token is refused to another holder now, and a newer one writes.
    await expect(store.put(k, "stale", { fence: fence(1, "other") })).rejects.toBeInstanceOf(StaleTokenError);
    await store.put(k, "v3", { fence: fence(3) });
    expect((await store.get(k))?.value).toBe("v3");
  });

  it("killed: a put is StoreUnavailableError or OutcomeUnknownError, never a plain error; restarted, the value and the ratchet are as before", async () => {
    const store = new FencedDynamo(client, { table: faultTable, timeoutMs: TIMEOUT_MS });
    const k = key();
    await store.put(k, "kept", { fence: fence(5) });
    await dynamo.faults.kill();
    let err: unknown;
    try {
      err = await store.put(k, "lost", { fence: fence(6) }).catch((e: unknown) => e);
    } finally {
      await dynamo.faults.restart();
    }
    expect(err instanceof OutcomeUnknownError || err instanceof StoreUnavailableError, String(err)).toBe(true);
    const now = await store.get(k);
    // The write may have reached the process before it died: only then is its value there.
    expect(["kept", "lost"]).toContain(now?.value);
    if (err instanceof StoreUnavailableError) expect(now?.value).toBe("kept");
    await expect(store.put(k, "stale", { fence: fence(4) })).rejects.toBeInstanceOf(StaleTokenError);
  });
});
