import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { StaleTokenError } from "../errors.js";
import { fenceLocks } from "./fence-lock.js";
import { quoteSchema, statements } from "./sql.js";
import { FencedPostgres } from "./store.js";
import { fenceAt as f, outcome, pgHarness, sleep, stillPending, type PgHarness } from "./test-support.js";

// One lease's writes side by side (fence-lock.ts): writes at the fence the row already holds share
// the resource's fence lock, a raise takes it alone, and a raise waiting for it is not overtaken.

let h: PgHarness;
beforeAll(async () => {
  h = await pgHarness();
});
afterAll(async () => {
  await h.close();
});

/** A transaction of the test's own, on a client of its own, kept open until end(). */
async function openTransaction(): Promise<{ client: pg.PoolClient; end(): Promise<void> }> {
  const client = await h.pool.connect();
  await client.query("BEGIN");
  return {
    client,
    async end() {
      await client.query("COMMIT");
      client.release();
    },
  };
}

/** How many backends run exactly this statement and wait for a lock they asked for (pg_locks: not granted). */
async function waitingFor(text: string): Promise<number> {
  const { rows } = await h.pool.query<{ n: string }>(
    `SELECT count(DISTINCT l.pid) AS n FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE NOT l.granted AND a.datname = current_database() AND a.query = $1`,
    [text],
  );
  return Number(rows[0]?.n);
}

/** How many backends wait for a lock (a row lock, or an advisory lock). */
async function lockWaiters(): Promise<number> {
  const { rows } = await h.pool.query<{ n: string }>(
    "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
  );
  return Number(rows[0]?.n);
}

describe("FencedPostgres: one lease's writes side by side", () => {
  it("a write of one key waiting for its record does not hold up the lease's writes of other keys; a raise waits for it, and writes after the raise wait behind the raise", async () => {
    const store = await h.store("side_by_side");
    const lease = f("r", 1n, "h1");
    for (const k of ["k1", "k2", "k3"]) await store.put(k, 0, { fence: lease });
    // k1's record held by the test: a put of k1 waits for it, holding the resource's fence lock shared.
    const k1 = await openTransaction();
    await k1.client.query(`SELECT 1 FROM "${store.schema}".records WHERE key = 'k1' FOR UPDATE`);
    const waitingK1 = store.put("k1", 1, { fence: lease });
    await expect.poll(lockWaiters).toBe(1);
    // The same lease writes k2 meanwhile (before: every write rewrote the fence row, and waited for k1's).
    expect(await store.put("k2", 1, { fence: lease })).toMatchObject({ token: 1n });
    // A newer lease's register must wait for the write in flight...
    const newer = store.register(f("r", 2n, "h2"));
    await expect.poll(lockWaiters).toBe(2);
    // ...and a write of the old lease that comes after it waits behind it (a share does not overtake a waiting raise).
    const late = outcome(store.put("k3", 1, { fence: lease }));
    await expect.poll(lockWaiters).toBe(3);
    expect(await stillPending(newer, 100)).toBe(true);
    await k1.end();
    await newer;
    expect(await waitingK1).toMatchObject({ token: 1n });
    expect(await late).toBeInstanceOf(StaleTokenError);
    expect(await h.recordRow(store, "k3")).toMatchObject({ value: 0 });
  });

  it("a write at the old fence whose statement began before a raise committed does not land: it sees the raise", async () => {
    const store = await h.store("snapshot");
    const lease = f("r", 1n, "h1");
    await store.put("k", 0, { fence: lease });
    // A raise in flight, as the store's ratchet does it: the fence lock exclusively, then the row, uncommitted.
    const raise = await openTransaction();
    await raise.client.query(`SELECT pg_advisory_xact_lock(${fenceLocks(`"${store.schema}"`).key("$1")})`, ["r"]);
    await raise.client.query(`UPDATE "${store.schema}".fence SET token = 2, holder = 'h2' WHERE resource = 'r'`);
    // The write's statement starts (its snapshot shows token 1) and waits for the fence lock.
    const write = outcome(store.put("k", 1, { fence: lease }));
    await expect.poll(lockWaiters).toBe(1);
    await raise.end();
    const err = await write;
    expect(err).toBeInstanceOf(StaleTokenError);
    expect(err).toMatchObject({ token: 1n, highest: 2n, highestHolder: "h2" });
    expect(await h.recordRow(store, "k")).toMatchObject({ value: 0, token: 1n });
  });

  it("two stores in different schemas of one database, one resource name: neither waits for the other's fence lock", async () => {
    const [one, two] = [await h.store("schema_one"), await h.store("schema_two")];
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let started!: () => void;
    const inside = new Promise<void>((resolve) => (started = resolve));
    // A transaction of the first store holds its fence lock on "orders" exclusively until released.
    const held = one.transaction(f("orders", 1n, "h1"), async () => {
      started();
      await released;
    });
    await inside;
    try {
      expect(await two.put("k", 1, { fence: f("orders", 1n, "h1") })).toMatchObject({ token: 1n });
      expect(await two.register(f("orders", 2n, "h2"))).toBeUndefined();
    } finally {
      release();
      await held;
    }
  });

  it("32 writers of one lease to different keys, without a pause: a newer lease's register that waits is overtaken by none of them — every write sent after it began to wait waits behind it and is refused", async () => {
    const seed = await h.store("stream");
    const pool = new pg.Pool({ connectionString: h.url, max: 36 });
    pool.on("error", () => undefined);
    const record = await openTransaction();
    let recordHeld = true;
    const releaseRecord = async (): Promise<void> => {
      if (!recordHeld) return;
      recordHeld = false;
      await record.end();
    };
    try {
      const store = new FencedPostgres(pool, { schema: seed.schema });
      const lease = f("r", 1n, "h1");
      await store.register(lease);
      await store.put("held", 0, { fence: lease });
      // A write of the lease kept in flight: it waits for "held"'s record, which the test holds, the
      // resource's fence lock held shared meanwhile. So the register below always has to wait.
      await record.client.query(`SELECT 1 FROM "${store.schema}".records WHERE key = 'held' FOR UPDATE`);
      const inFlight = outcome(store.put("held", 1, { fence: lease }));
      await expect.poll(lockWaiters).toBe(1);
      let written = 0;
      let registerWaits = false;
      const refusedAfter: unknown[] = [];
      const overtook: string[] = [];
      const writer = async (w: number): Promise<void> => {
        // Until a write sent after the register began to wait is refused (one sent before may be refused too).
        for (let i = 0; ; i++) {
          const sentAfter = registerWaits;
          const result = await outcome(store.put(`w${w}/${i % 4}`, i, { fence: lease }));
          if (result instanceof StaleTokenError) {
            if (!sentAfter) continue;
            refusedAfter.push(result);
            return;
          }
          if (result instanceof Error) throw result;
          if (sentAfter) overtook.push(`w${w}/${i % 4}`);
          written++;
        }
      };
      const writers = Promise.all(Array.from({ length: 32 }, (_, w) => writer(w)));
      writers.catch(() => undefined);
      await expect.poll(() => written, { timeout: 10_000 }).toBeGreaterThan(100);
      const register = outcome(store.register(f("r", 2n, "h2")));
      // The register's statement is queued for a lock (the fence lock; a row lock without it): from
      // here on, what the writers send comes after it.
      const ratchet = statements(quoteSchema(seed.schema)).ratchet;
      await expect.poll(() => waitingFor(ratchet)).toBe(1);
      registerWaits = true;
      // Each writer's next write waits behind the register (the in-flight put, the register and 32
      // writers), unless one is admitted first: that is the starvation this test is for.
      while (overtook.length === 0 && (await lockWaiters()) < 34) await sleep(10);
      expect(overtook, "writes sent after the register began to wait were admitted before it").toEqual([]);
      await releaseRecord();
      expect(await register).toBeUndefined();
      expect(await inFlight).toMatchObject({ token: 1n });
      await writers;
      expect(refusedAfter.length).toBe(32);
      expect(overtook).toEqual([]);
    } finally {
      await releaseRecord();
      await pool.end();
    }
  });
});
