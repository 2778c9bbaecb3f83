import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fenceAt as f, pgHarness, type PgHarness } from "./test-support.js";
import { WriteOrder } from "./write-order.js";

describe("WriteOrder", () => {
  it("a put comes after the newest version the database gave the store, of any key; 0 before any", () => {
    const order = new WriteOrder();
    expect(order.after()).toBe("0");
    order.saw("7");
    order.saw("6"); // answers may come out of order: the newest stays
    expect(order.after()).toBe("7");
    order.saw("9223372036854775807");
    expect(order.after()).toBe("9223372036854775807");
  });
});

describe("unconditional puts of one key at once, one store, one fence", () => {
  let h: PgHarness;
  beforeAll(async () => {
    h = await pgHarness();
  });
  afterAll(async () => {
    await h.close();
  });

  it("all land: those refused as out of order (they came after the same version) are sent again unordered", async () => {
    const store = await h.store("same_key_at_once");
    const fence = f("r", 1n, "h1");
    await store.put("k", -1, { fence });
    const results = await Promise.all(Array.from({ length: 16 }, (_, i) => store.put("k", i, { fence })));
    const versions = results.map((r) => BigInt(r.version));
    expect(new Set(versions).size).toBe(16);
    const newest = versions.reduce((a, b) => (a > b ? a : b));
    const record = await store.get("k");
    expect(BigInt(record?.version ?? "0")).toBe(newest);
    expect(record?.value).toBe(versions.indexOf(newest));
  });

  it("migrate() puts back a version sequence someone altered: a per-session cache or a wrap-around would hand a later write a smaller version", async () => {
    const store = await h.store("sequence_shape");
    const shape = async (): Promise<unknown> =>
      (
        await h.pool.query(
          "SELECT increment_by::text AS increment, cache_size::text AS cache, cycle FROM pg_sequences WHERE schemaname = $1 AND sequencename = 'record_version'",
          [store.schema],
        )
      ).rows[0];
    expect(await shape()).toEqual({ increment: "1", cache: "1", cycle: false });
    await h.pool.query(`ALTER SEQUENCE "${store.schema}".record_version CACHE 100 CYCLE`);
    expect(await shape()).toEqual({ increment: "1", cache: "100", cycle: true });
    await store.migrate();
    expect(await shape()).toEqual({ increment: "1", cache: "1", cycle: false });
  });
});
