import { startPostgres, startRedisNodes, type RedisNodes, type StartedPostgres } from "@fenced/servers";
import { StaleTokenError, VersionMismatchError } from "@fenced/store";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openCounterStore, type CounterStore, type StoreConnection } from "./counter-store.js";
import {
  GatewayClient,
  GatewayFailedError,
  GatewayRefusedError,
  LockBusyError,
  RegistrationRefusedError,
  type GatewayLease,
} from "./gateway-client.js";
import { GatewayProcess, newApiKey } from "./gateway-process.js";
import { EMPTY_DOC, increment } from "./history.js";

/**
 * The chaos workers' side of the gateway, against the real thing: the gateway CLI as a process of
 * its own over real Redis nodes and PostgreSQL, configured as a chaos run configures it. Every
 * answer a worker branches on is provoked for real, and mapped to the outcome the history records.
 */

const RESOURCE = "chaos-0";
const KEY = "counter/chaos-0";
/** Two more resources, for a lease of both (asked in this order). */
const PAIR = ["chaos-2", "chaos-1"] as const;

let postgres: StartedPostgres;
let redis: RedisNodes;
let gateway: GatewayProcess;
let setup: CounterStore;

beforeAll(async () => {
  [postgres, redis] = await Promise.all([startPostgres(), startRedisNodes(3, { faults: true })]);
  const connection: StoreConnection = { backend: "postgres", url: postgres.url, schema: "chaos_client_test" };
  setup = await openCounterStore(connection, "full", { timeoutMs: 5_000 });
  await setup.init([{ key: KEY, resource: RESOURCE }, ...PAIR.map((resource) => ({ key: `counter/${resource}`, resource }))]);
  gateway = await GatewayProcess.start({
    apiKey: newApiKey(),
    redisUrls: redis.urls,
    store: connection,
    resources: ["chaos-"],
    keys: ["counter/"],
    nodeTimeoutMs: 150,
    deadlineMs: 5_000,
    inlineLimit: 1024,
  });
});

afterAll(async () => {
  await gateway?.stop();
  await setup?.close().catch(() => undefined);
  await Promise.allSettled([redis?.stop(), postgres?.stop()]);
});

/** A lease once the gateway has reconnected to restarted nodes (503 until a quorum answers). */
async function acquireSoon(client: GatewayClient, register: boolean, asked: string | readonly string[] = RESOURCE): Promise<GatewayLease> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    try {
      return await client.acquire(asked, 10_000, register);
    } catch (err) {
      if (!(err instanceof LockBusyError) || Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

describe("the chaos workers' gateway client", () => {
  it("a lease of two resources: a credential per resource, both records in one POST /v1/records, a stale fence refuses both", async () => {
    const client = new GatewayClient(gateway.port, gateway.apiKey, 5_000);
    const keys = PAIR.map((r) => `counter/${r}`);
    try {
      const pair = await acquireSoon(client, false, PAIR);
      expect(pair.fences.map((f) => f.resource)).toEqual(PAIR);
      for (const f of pair.fences) expect(f.fence).toMatch(/^fc2\./);
      const reads = await Promise.all(keys.map((key) => client.read("records", key)));
      const docs = pair.fences.map((f, i) => increment(EMPTY_DOC, `0.0${"ab"[i] ?? ""}`, f.token.toString()));
      const writes = (ifVersion: boolean): { key: string; resource: string; value: unknown; ifVersion?: string }[] =>
        PAIR.map((resource, i) => ({
          key: keys[i] as string,
          resource,
          value: docs[i],
          ...(ifVersion ? { ifVersion: reads[i]?.version as string } : {}),
        }));
      await client.writeAll(
        pair.fences.map((f) => f.fence),
        writes(true),
      );
      for (const [i, key] of keys.entries()) expect((await setup.read(key)).doc).toEqual(docs[i]);
      // The versions read are spent: 412, as VersionMismatchError, and nothing written.
      await expect(
        client.writeAll(
          pair.fences.map((f) => f.fence),
          writes(true),
        ),
      ).rejects.toBeInstanceOf(VersionMismatchError);
      await client.release(pair.leaseId);

      // A newer lease of one of the two, registered: the pair's fences are stale there, and neither record is written.
      const newer = await acquireSoon(client, true, PAIR[1]);
      const stale = await client
        .writeAll(
          pair.fences.map((f) => f.fence),
          writes(false),
        )
        .catch((e: unknown) => e);
      expect(stale).toBeInstanceOf(StaleTokenError);
      expect(stale).toMatchObject({ resource: PAIR[1], token: pair.fences[1]?.token, highest: newer.token });
      for (const [i, key] of keys.entries()) expect((await setup.read(key)).doc).toEqual(docs[i]);
      await client.release(newer.leaseId);
    } finally {
      client.close();
    }
  });

  it(
    "maps every answer a worker branches on: lease, held lock, write, stale token, version, forged credential, refused registration, pause, backend down",
    { timeout: 90_000 },
    async () => {
      const client = new GatewayClient(gateway.port, gateway.apiKey, 5_000);
      try {
        // The gateway listens before its Redis connections are up: its first leases may answer 503.
        const a = await acquireSoon(client, false);
        expect(a.resource).toBe(RESOURCE);
        expect(a.holder).toMatch(/^[0-9a-f]{32}$/);
        expect(a.fence).toMatch(/^fc2\./);
        await expect(client.acquire(RESOURCE, 10_000, false)).rejects.toBeInstanceOf(LockBusyError);

        // Read, then write with the credential and If-Match on the version read: the version moves.
        const read = await client.read("records", KEY);
        expect(JSON.parse(read.body.toString("utf8"))).toEqual(EMPTY_DOC);
        const one = increment(EMPTY_DOC, "0.0", a.token.toString());
        const written = await client.write("records", KEY, Buffer.from(JSON.stringify(one)), a.fence, read.version);
        expect(written).not.toBe(read.version);
        await client.release(a.leaseId);

        // A newer lease registered on acquire: the older one is refused, even without writing first.
        const b = await client.acquire(RESOURCE, 10_000, true);
        expect(b.token).toBeGreaterThan(a.token);
        const stale = await client
          .write("records", KEY, Buffer.from(JSON.stringify(increment(one, "0.1", a.token.toString()))), a.fence, undefined)
          .catch((e: unknown) => e);
        expect(stale).toBeInstanceOf(StaleTokenError);
        expect(stale).toMatchObject({ resource: RESOURCE, token: a.token, highest: b.token });
        // The version read before the first write is no longer current.
        await expect(client.write("records", KEY, Buffer.from(JSON.stringify(one)), b.fence, read.version)).rejects.toBeInstanceOf(
          VersionMismatchError,
        );
        // A credential whose signature is altered by one character: refused before the store is called
        // (403), nothing written. Not the last character: its low bits are padding, and a change there
        // can make the encoding non-canonical, which is a malformed credential (400) instead.
        const at = b.fence.length - 5;
        const changed = b.fence[at] === "A" ? "B" : "A";
        const forged = await client
          .write("records", KEY, Buffer.from("{}"), `${b.fence.slice(0, at)}${changed}${b.fence.slice(at + 1)}`, undefined)
          .catch((e: unknown) => e);
        expect(forged).toBeInstanceOf(GatewayRefusedError);
        expect(forged).toMatchObject({ status: 403, type: "/problems/invalid-credential" });
        expect((await setup.read(KEY)).doc).toEqual(one);
        await client.release(b.leaseId);

        // Every lock node wiped: the lock hands out tokens the store has already registered, and the
        // gateway refuses to register them (409 stale-token on POST /v1/leases) until the counters pass.
        for (const node of redis.nodes) await node.restart({ keepData: false });
        const refusals: RegistrationRefusedError[] = [];
        for (;;) {
          const lease = await acquireSoon(client, true).catch((e: unknown) => e);
          if (!(lease instanceof RegistrationRefusedError)) {
            expect((lease as GatewayLease).token).toBeGreaterThan(b.token);
            await client.release((lease as GatewayLease).leaseId);
            break;
          }
          refusals.push(lease);
          expect(lease.token).toBeLessThanOrEqual(b.token);
          expect(lease.highest).toBe(b.token);
        }
        expect(refusals.map((r) => r.token)).toContain(b.token);

        // A gateway that does not answer: the request fails with the socket's own error, not as a refusal
        // (a write's outcome is then unknown).
        const impatient = new GatewayClient(gateway.port, gateway.apiKey, 300);
        const c = await acquireSoon(client, false);
        gateway.pause();
        const silent = await impatient.write("records", KEY, Buffer.from(JSON.stringify(one)), c.fence, undefined).catch((e: unknown) => e);
        gateway.resume();
        impatient.close();
        expect(silent).toBeInstanceOf(Error);
        expect(silent).not.toBeInstanceOf(GatewayRefusedError);
        expect(silent).not.toBeInstanceOf(GatewayFailedError);
        expect(silent).not.toBeInstanceOf(StaleTokenError);

        // The store gone: 5xx, a failure whose outcome the gateway cannot know either.
        await postgres.stop();
        const down = await client.write("records", KEY, Buffer.from(JSON.stringify(one)), c.fence, undefined).catch((e: unknown) => e);
        expect(down).toBeInstanceOf(GatewayFailedError);
        expect(down).toMatchObject({ status: 503 });
      } finally {
        client.close();
      }
    },
  );
});
