import { InvalidArgumentError } from "@fenced/fence";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Fence } from "../fence.js";
import { FencedPostgres } from "./store.js";
import { gate, outcome, pgHarness, type PgHarness, sleep, stillPending } from "./test-support.js";

let h: PgHarness;
beforeAll(async () => {
  h = await pgHarness();
});
afterAll(async () => {
  await h.close();
});

const f = (resource: string, token: bigint): Fence => ({ resource, token, holder: "h" });

/** Holds `resource`'s fence row in an open fenced transaction until the returned release() is called. */
async function holdFence(store: FencedPostgres, fence: Fence): Promise<{ release(): Promise<void> }> {
  const inside = gate();
  const finish = gate();
  const tx = store.transaction(fence, async () => {
    inside.open();
    await finish.opened;
  });
  await inside.opened;
  return {
    async release() {
      finish.open();
      await tx;
    },
  };
}

describe("FencedPostgres: AbortSignal on writes", () => {
  it("an already aborted signal rejects every write with its reason, before any I/O", async () => {
    let io = 0;
    const trap = {
      query: () => ((io += 1), Promise.reject(new Error("I/O"))),
      connect: () => ((io += 1), Promise.reject(new Error("I/O"))),
    };
    const store = new FencedPostgres(trap, { schema: "unused" });
    const controller = new AbortController();
    const reason = new Error("lease lost");
    controller.abort(reason);
    const signal = controller.signal;
    const calls = [
      store.put("k", 1, { fence: f("r", 1n), signal }),
      store.put("k", 1, { fence: f("r", 1n), ifVersion: "5", signal }),
      store.delete("k", { fence: f("r", 1n), signal }),
      store.delete("k", { fence: f("r", 1n), ifVersion: "5", signal }),
      store.register(f("r", 1n), { signal }),
      store.transfer("k", { from: f("r", 1n), to: f("s", 1n), signal }),
      store.transaction(f("r", 1n), () => Promise.resolve(), { signal }),
    ];
    for (const call of calls) expect(await outcome(call)).toBe(reason);
    expect(io).toBe(0);
  });

  it("an abort during transaction() rolls it back: neither the caller's SQL nor the ratchet is committed", async () => {
    const store = await h.store("abort_tx");
    await h.pool.query(`CREATE TABLE "${store.schema}".ledger (entry text)`);
    await store.register(f("ledger", 1n));
    const controller = new AbortController();
    const reason = new Error("lease lost");
    const err = await outcome(
      store.transaction(
        f("ledger", 2n),
        async (client) => {
          await client.query({ text: `INSERT INTO "${store.schema}".ledger VALUES ('paid')` });
          controller.abort(reason); // the lease is lost while the work runs
        },
        { signal: controller.signal },
      ),
    );
    expect(err).toBe(reason);
    expect((await h.pool.query(`SELECT * FROM "${store.schema}".ledger`)).rows).toEqual([]);
    expect(await h.fenceRow(store, "ledger")).toEqual({ token: 1n, holder: "h" });
  });

  it("an abort while a multi-statement write (a delete, a transfer) waits for the fence row stops it before COMMIT: nothing written", async () => {
    const store = await h.store("abort_wait");
    await store.put("k", "v1", { fence: f("r", 1n) });
    await store.put("gone", "x", { fence: f("r", 1n) });
    const before = { k: await h.recordRow(store, "k"), gone: await h.recordRow(store, "gone") };
    const writes = [
      (signal: AbortSignal) => store.delete("gone", { fence: f("r", 2n), signal }),
      (signal: AbortSignal) => store.transfer("k", { from: f("r", 2n), to: f("s", 1n), signal }),
    ];
    for (const [i, write] of writes.entries()) {
      const holder = await holdFence(store, f("r", 1n));
      const controller = new AbortController();
      const pending = write(controller.signal);
      expect(await stillPending(pending, 100), `write #${i} waits for the fence row`).toBe(true);
      const reason = new Error(`abort #${i}`);
      controller.abort(reason);
      await holder.release();
      expect(await outcome(pending), `write #${i}`).toBe(reason);
      expect({ k: await h.recordRow(store, "k"), gone: await h.recordRow(store, "gone") }, `write #${i}`).toEqual(before);
      expect(await h.fenceRow(store, "r"), `write #${i}`).toEqual({ token: 1n, holder: "h" });
      expect(await h.fenceRow(store, "s"), `write #${i}`).toBeUndefined();
    }
  });

  it("a single-statement write already sent completes: its outcome is the server's, and it is reported, not hidden", async () => {
    const store = await h.store("abort_single");
    const v = await store.put("cas", "v1", { fence: f("r", 1n) });
    const writes = [
      { key: "k", write: (signal: AbortSignal) => store.put("k", "written", { fence: f("r", 1n), signal }) },
      { key: "cas", write: (signal: AbortSignal) => store.put("cas", "written", { fence: f("r", 1n), ifVersion: v.version, signal }) },
    ];
    for (const { key, write } of writes) {
      const holder = await holdFence(store, f("r", 1n));
      const controller = new AbortController();
      const pending = write(controller.signal);
      expect(await stillPending(pending, 50), `${key} waits for the fence row`).toBe(true);
      controller.abort(new Error("too late"));
      await holder.release();
      const result = await pending;
      expect(await store.get(key)).toMatchObject({ value: "written", version: result.version });
    }
    const holder = await holdFence(store, f("r", 1n));
    const controller = new AbortController();
    const deletion = store.delete("cas", {
      fence: f("r", 1n),
      ifVersion: (await store.get("cas"))?.version ?? "",
      signal: controller.signal,
    });
    await sleep(50);
    controller.abort(new Error("too late"));
    await holder.release();
    expect((await deletion).token).toBe(1n);
    expect(await store.get("cas")).toBeUndefined();
  });

  it("a signal that is not an AbortSignal is bad input", async () => {
    const store = await h.store("abort_bad");
    for (const signal of [null, 5, "abort", {}, { aborted: "yes" }]) {
      await expect(store.put("k", 1, { fence: f("r", 1n), signal } as never)).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(store.transaction(f("r", 1n), () => Promise.resolve(), { signal } as never)).rejects.toBeInstanceOf(
        InvalidArgumentError,
      );
    }
    expect(await h.counts(store)).toEqual({ fence: 0, records: 0 });
  });
});

describe("FencedPostgres: the options and the pool are structural", () => {
  it("accepts undefined for every optional field", async () => {
    const store = await h.store("undefined_fields");
    const fence: Fence = { resource: "r", token: 1n, holder: undefined };
    const put = await store.put("k", 1, { fence, ifVersion: undefined, signal: undefined });
    await store.put("k", 2, { fence, ifVersion: put.version, signal: undefined });
    await store.register(fence, { signal: undefined });
    await store.transfer("k", { from: fence, to: { resource: "s", token: 1n }, ifVersion: undefined, signal: undefined });
    await store.transaction({ resource: "s", token: 1n }, () => Promise.resolve(), { signal: undefined });
    const deleted = await store.delete("k", { fence: { resource: "s", token: 1n }, ifVersion: undefined, signal: undefined });
    expect(deleted.token).toBe(1n);
    expect(deleted.version).toMatch(/^[0-9]+$/);
  });

  it("works with any pool that has query() and connect() → { query(), release() }: no pg types needed", async () => {
    let connects = 0;
    // Written against nothing but the shape FencedPostgres documents; a user's own pg version, a wrapper, or a proxy.
    const minimal = {
      query: (config: { readonly name?: string; readonly text: string; readonly values?: readonly unknown[] }) =>
        h.pool.query({ ...config, values: config.values === undefined ? [] : [...config.values] }),
      connect: async () => {
        connects += 1;
        const client = await h.pool.connect();
        return {
          query: (config: { readonly name?: string; readonly text: string; readonly values?: readonly unknown[] }) =>
            client.query({ ...config, values: config.values === undefined ? [] : [...config.values] }),
          release: (err?: Error | boolean) => client.release(err),
          extra: "the pool's own client type reaches transaction()",
        };
      },
    };
    const schema = `t_minimal_${process.pid}`;
    await h.pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    try {
      const store = new FencedPostgres(minimal, { schema });
      await store.migrate();
      const put = await store.put("k", "v", { fence: f("r", 1n) });
      await store.put("k", "w", { fence: f("r", 1n), ifVersion: put.version });
      const extra = await store.transaction(f("r", 1n), (client) => Promise.resolve(client.extra));
      expect(extra).toBe("the pool's own client type reaches transaction()");
      expect(await store.get("k")).toMatchObject({ value: "w", holder: "h" });
      expect(connects).toBeGreaterThan(0);
    } finally {
      await h.pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    }
  });
});
