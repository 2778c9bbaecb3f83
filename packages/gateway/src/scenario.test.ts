import { setTimeout as sleep } from "node:timers/promises";
import { resourceKeys } from "@fenced/lock";
import { ANSWERING_NODE_TIMEOUT_MS, waitFor } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { expectStillHeld, heldOnQuorum, LOCK_QUORUM, valuesOf } from "./lock-nodes-test-support.js";
import {
  bearer,
  KEYS,
  runGateway,
  startBackends,
  writeHeaders,
  type Backends,
  type HttpClient,
  type RunningGateway,
} from "./test-support.js";

/**
 * The article's figure over HTTP, against real Redis (3 nodes), Postgres and S3: client 1 takes the
 * lease (token 33) and pauses past its expiry; client 2 takes it (34) and writes; client 1 resumes
 * and writes with 33. The storage must refuse 33, say that 34 is the highest, and keep 34's value.
 */
let backends: Backends;
let a: RunningGateway;
let b: RunningGateway;

beforeAll(async () => {
  backends = await startBackends({ redis: 3, postgres: true, s3: true });
  // Two instances over the same backends: nothing a client does may depend on which one it reaches.
  const options = backends.gatewayOptions();
  a = await runGateway(options);
  b = await runGateway(options);
});
afterAll(async () => {
  await a?.close();
  await b?.close();
  await backends?.stop();
});

/** Counters at 32 on every node: the next lease is 33, as in the article. */
async function counterAt(resource: string, value: bigint): Promise<void> {
  await Promise.all(backends.redisClients.map((r) => r.set(resourceKeys(resource).counter, value.toString())));
}

async function lease(
  client: HttpClient,
  resource: string,
  ttlMs: number,
): Promise<{ token: string; leaseId: string; validUntil: number; resource: string }> {
  const res = await client.json("POST", "/v1/leases", { resource, ttlMs }, bearer(KEYS.admin));
  expect(res.status, res.text()).toBe(201);
  return res.json();
}

describe.each([
  { store: "records", body: (who: string) => JSON.stringify({ writer: who }), type: "application/json" },
  { store: "objects", body: (who: string) => `bytes from ${who}`.repeat(100), type: "text/plain" },
])("the article's scenario over HTTP: $store", ({ store, body, type }) => {
  it("33 pauses, 34 writes, 33's write is refused with 409 and highest 34; 34's value stays", async () => {
    const resource = `article/${store}`;
    const key = `article/${store}/file`;
    await counterAt(resource, 32n);

    const client1 = a.client;
    const client2 = b.client;
    const l33 = await lease(client1, resource, 300);
    expect(l33.token).toBe("33");
    expect(typeof l33.token).toBe("string");
    // Client 1's process pauses (GC, SIGSTOP, …) for longer than its lease.
    await sleep(450);

    const l34 = await lease(client2, resource, 10_000);
    expect(l34.token).toBe("34");
    const w34 = await client2.send({
      method: "PUT",
      path: `/v1/${store}/${key}`,
      headers: { ...writeHeaders(KEYS.admin, l34.token, { "fencing-resource": resource }), "content-type": type },
      body: body("34"),
    });
    expect(w34.status, w34.text()).toBe(200);
    expect(w34.json()).toMatchObject({ token: "34" });
    expect(w34.headers["fencing-token"]).toBe("34");

    // Client 1 wakes up, believes it still holds the lease, and writes.
    const w33 = await client1.send({
      method: "PUT",
      path: `/v1/${store}/${key}`,
      headers: { ...writeHeaders(KEYS.admin, l33.token, { "fencing-resource": resource }), "content-type": type },
      body: body("33"),
    });
    expect(w33.status).toBe(409);
    expect(w33.headers["content-type"]).toMatch(/^application\/problem\+json/);
    expect(w33.json()).toMatchObject({ type: "/problems/stale-token", status: 409, resource, token: "33", highest: "34" });

    const read = await client1.send({ method: "GET", path: `/v1/${store}/${key}`, headers: bearer(KEYS.admin) });
    expect(read.status).toBe(200);
    expect(read.text()).toBe(body("34"));
    expect(read.headers["fencing-token"]).toBe("34");
    expect(read.headers["fencing-resource"]).toBe("article/" + store);
    expect(read.headers.etag).toBe(w34.headers.etag);

    // And straight from the backend, not through the gateway.
    if (store === "records") {
      const got = await a.gateway.records?.get(key);
      expect(got).toMatchObject({ value: { writer: "34" }, token: 34n, resource });
    } else {
      const got = await a.gateway.objects?.get(key);
      expect(got === undefined ? undefined : Buffer.concat(await got.body.toArray()).toString()).toBe(body("34"));
      expect(got?.token).toBe(34n);
    }

    // 33's lease is gone: extending it says so, from either instance.
    const extend33 = await client1.json("POST", "/v1/leases/extend", { leaseId: l33.leaseId, ttlMs: 1_000 }, bearer(KEYS.admin));
    expect(extend33.status).toBe(409);
    expect(extend33.json()).toMatchObject({ type: "/problems/lease-lost", token: "33" });
    const release34 = await client1.json("POST", "/v1/leases/release", { leaseId: l34.leaseId }, bearer(KEYS.admin));
    expect(release34.status).toBe(204);
  });
});

describe("leases through two stateless instances", () => {
  it("a lease taken on one instance is extended and released on the other", async () => {
    const l = await lease(a.client, "leases/shared", 2_000);
    const extended = await b.client.json("POST", "/v1/leases/extend", { leaseId: l.leaseId, ttlMs: 30_000 }, bearer(KEYS.admin));
    expect(extended.status, extended.text()).toBe(200);
    expect(extended.json()).toMatchObject({ resource: "leases/shared", token: l.token });
    // A new end, sealed into a new lease id and a new credential.
    expect(extended.json<{ validUntil: number }>().validUntil).toBeGreaterThan(Date.now() + 25_000);
    expect(extended.json<{ leaseId: string }>().leaseId).not.toBe(l.leaseId);
    // Extend and release resolve once a quorum answered: a release is sent to every node and lands on
    // the last within the node timeout; a grant and an extension promise a quorum, no more (a node whose
    // ACQUIRE was answered NOSCRIPT after the outcome was known holds nothing: the lock's quorum.ts, fallBack).
    const onNodes = (what: string, count: number, settled: (r: (typeof backends.redisClients)[number]) => Promise<boolean>) =>
      waitFor(
        what,
        async () => (await Promise.all(backends.redisClients.map(settled))).filter(Boolean).length >= count,
        ANSWERING_NODE_TIMEOUT_MS,
      );
    await onNodes(
      "the extension on a quorum of lock nodes",
      LOCK_QUORUM,
      async (r) => (await r.pttl(resourceKeys("leases/shared").lease)) > 25_000,
    );

    // Held: another client is told so with 409 lock-held (worth retrying), not an error.
    const other = await a.client.json("POST", "/v1/leases", { resource: "leases/shared", ttlMs: 1_000 }, bearer(KEYS.admin));
    expect(other.status).toBe(409);
    expect(other.json()).toMatchObject({ type: "/problems/lock-held" });
    expect(other.headers["retry-after"]).toBe("1");

    expect((await b.client.json("POST", "/v1/leases/release", { leaseId: l.leaseId }, bearer(KEYS.admin))).status).toBe(204);
    await onNodes("the release on every lock node", 3, async (r) => (await r.exists(resourceKeys("leases/shared").lease)) === 0);
    const next = await lease(a.client, "leases/shared", 1_000);
    expect(BigInt(next.token)).toBeGreaterThan(BigInt(l.token));
  });

  it("a forged lease id (right resource and token, another value) neither extends nor releases the lease", async () => {
    const l = await lease(a.client, "leases/forged", 10_000);
    const before = await heldOnQuorum(backends.redisClients, "leases/forged");
    const [v, k, payload, mac] = l.leaseId.split(".") as [string, string, string, string];
    const fields = Buffer.from(payload, "base64url").toString("utf8").split("\n");
    expect(valuesOf(before)[0]).toBe(fields[1]);
    fields[1] = "0".repeat(32);
    const forged = [v, k, Buffer.from(fields.join("\n")).toString("base64url"), mac].join(".");
    const extend = await b.client.json("POST", "/v1/leases/extend", { leaseId: forged, ttlMs: 60_000 }, bearer(KEYS.admin));
    expect(extend.status).toBe(403);
    expect(extend.json()).toMatchObject({ type: "/problems/invalid-lease-id", reason: "bad-signature" });
    expect((await b.client.json("POST", "/v1/leases/release", { leaseId: forged }, bearer(KEYS.admin))).status).toBe(403);
    // Neither extended nor released on any node.
    await expectStillHeld(backends.redisClients, "leases/forged", before, 10_000);
  });

  it("lease ids round-trip resources with '/', '.', spaces and non-ASCII", async () => {
    for (const resource of ["a.b/c d", "zürich/⚙/日本", "x".repeat(512)]) {
      const l = await lease(a.client, resource, 5_000);
      expect(l.resource).toBe(resource);
      const extended = await b.client.json("POST", "/v1/leases/extend", { leaseId: l.leaseId, ttlMs: 5_000 }, bearer(KEYS.admin));
      expect(extended.status, extended.text()).toBe(200);
      expect((await b.client.json("POST", "/v1/leases/release", { leaseId: l.leaseId }, bearer(KEYS.admin))).status).toBe(204);
    }
  });

  it("tokens are JSON strings and never JSON numbers, also past 2^53", async () => {
    await counterAt("leases/big", 2n ** 60n);
    const res = await a.client.json("POST", "/v1/leases", { resource: "leases/big", ttlMs: 1_000 }, bearer(KEYS.admin));
    expect(res.text()).toContain(`"token":"${2n ** 60n + 1n}"`);
  });
});
