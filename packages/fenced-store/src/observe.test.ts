import { subscribe, unsubscribe } from "node:diagnostics_channel";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { StaleTokenError, VersionMismatchError } from "./errors.js";
import { STORE_CHANNELS, type StoreWriteMessage } from "./index.js";
import { pgHarness, type PgHarness } from "./postgres/test-support.js";
import { MemoryS3, radosgwProfile } from "./s3/memory-s3-test-support.js";
import { FencedS3 } from "./s3/store.js";

/** Every write outcome published while a test runs. */
const seen: StoreWriteMessage[] = [];
const listener = (message: unknown): void => {
  seen.push(message as StoreWriteMessage);
};
const fence = (token: number, resource = "R") => ({ resource, token: BigInt(token) });

describe("fenced:store:write (README, Observing the stores)", () => {
  let pg: PgHarness;

  beforeAll(async () => {
    pg = await pgHarness();
  });
  afterEach(() => {
    unsubscribe(STORE_CHANNELS.write, listener);
    seen.length = 0;
  });
  afterAll(async () => {
    await pg?.close();
  });

  it("PostgreSQL: each write's outcome with its key, fences and version; refusals by their error's code; reads are not published", async () => {
    const store = await pg.store("observe");
    subscribe(STORE_CHANNELS.write, listener);
    const first = await store.put("k", { n: 1 }, { fence: fence(5) });
    await expect(store.put("k", { n: 2 }, { fence: fence(4) })).rejects.toBeInstanceOf(StaleTokenError);
    await expect(store.put("k", { n: 3 }, { fence: fence(6), ifVersion: "999" })).rejects.toBeInstanceOf(VersionMismatchError);
    await store.get("k");
    await store.register([fence(7), fence(1, "S")]);

    expect(seen.map((m) => [m.store, m.operation, m.outcome])).toEqual([
      ["postgres", "put", "ok"],
      ["postgres", "put", "STALE_TOKEN"],
      ["postgres", "put", "VERSION_MISMATCH"],
      ["postgres", "register", "ok"],
    ]);
    expect(seen[0]).toMatchObject({ key: "k", fences: [{ resource: "R", token: 5n }], version: first.version });
    expect(seen[0]?.durationMs).toBeGreaterThan(0);
    expect(seen[1]?.error).toBeInstanceOf(StaleTokenError);
    expect(seen[3]?.fences.map((f) => f.resource)).toEqual(["R", "S"]);
  });

  it("S3: each write's outcome, put, delete and update alike, over the in-memory server", async () => {
    const memory = new MemoryS3(radosgwProfile);
    const bucket = memory.createBucket("observe");
    const store = new FencedS3(memory.client("one"), { bucket, prefix: "p/" });
    subscribe(STORE_CHANNELS.write, listener);
    const first = await store.put("k", "one", { fence: fence(5) });
    await expect(store.put("k", "two", { fence: fence(4) })).rejects.toBeInstanceOf(StaleTokenError);
    await store.update("k", () => "three", { fence: fence(5) });
    await store.getBytes("k");
    await store.delete("k", { fence: fence(6) });

    expect(seen.map((m) => [m.store, m.operation, m.outcome])).toEqual([
      ["s3", "put", "ok"],
      ["s3", "put", "STALE_TOKEN"],
      ["s3", "update", "ok"],
      ["s3", "delete", "ok"],
    ]);
    expect(seen[0]).toMatchObject({ key: "k", fences: [{ resource: "R", token: 5n }], version: first.version });
  });
});
