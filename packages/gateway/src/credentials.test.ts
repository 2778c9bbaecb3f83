import { randomBytes } from "node:crypto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { MAX_TOKEN } from "@fenced/fence";
import { mintFenceCredential } from "@fenced/fence/credentials";
import { resourceKeys } from "@fenced/lock";
import { bearer, FENCE_KEYS, KEYS, runGateway, useGateway, writeHeaders } from "./test-support.js";

/**
 * Only fences the lock issued can write: an ordinary API key writes with the signed credential its
 * lease came with, and the gateway takes resource, token and holder from it alone. Every forgery is
 * refused with its documented 4xx, and PostgreSQL and S3, read directly, show nothing written.
 */
const fixture = useGateway({ postgres: true, s3: true, redis: 3 });

const state = (): Promise<string> => fixture.state();

interface Granted {
  readonly token: string;
  readonly holder: string;
  readonly leaseId: string;
  readonly fence: string;
  readonly validUntil: number;
}

async function lease(resource: string, register = false): Promise<Granted> {
  const res = await fixture.gw.client.json("POST", "/v1/leases", { resource, ttlMs: 10_000, register }, bearer(KEYS.service));
  expect(res.status, res.text()).toBe(201);
  expect(res.headers.location).toBeUndefined();
  return res.json<Granted>();
}

const put = (route: string, key: string, headers: Record<string, string>, body = '{"n":1}') =>
  fixture.gw.client.send({
    method: "PUT",
    path: `/v1/${route}/${key}`,
    headers: { ...bearer(KEYS.service), "content-type": "application/json", ...headers },
    body,
  });

describe.each(["records", "objects"])("%s", (route) => {
  it("a lease's credential writes; the gateway takes the fence from it", async () => {
    const l = await lease(`svc/${route}-a`);
    const ok = await put(route, `svc/${route}/a`, { "fencing-credential": l.fence });
    expect(ok.status, ok.text()).toBe(200);
    const read = await fixture.gw.client.send({ method: "GET", path: `/v1/${route}/svc/${route}/a`, headers: bearer(KEYS.service) });
    expect(read.headers).toMatchObject({ "fencing-token": l.token, "fencing-resource": `svc/${route}-a` });
  });

  it("without a credential an ordinary key is refused (403 credential-required), however large its token", async () => {
    const before = await state();
    for (const token of [0n, 1n, MAX_TOKEN]) {
      const refused = await put(route, `svc/${route}/plain`, writeHeaders(KEYS.service, token, { "fencing-resource": `svc/${route}-a` }));
      expect(refused.status).toBe(403);
      expect(refused.json()).toMatchObject({ type: "/problems/credential-required" });
    }
    expect(await state()).toBe(before);
  });

  it("forged, altered, truncated, re-ordered, other-resource and unknown-key credentials are refused and write nothing", async () => {
    const l = await lease(`svc/${route}-b`);
    const before = await state();
    const [v, id, payload, mac] = l.fence.split(".") as [string, string, string, string];
    const foreign = mintFenceCredential(
      { resource: `svc/${route}-b`, token: MAX_TOKEN, holder: l.holder, validUntil: l.validUntil },
      { id: "current", secret: randomBytes(32) },
    );
    const otherScope = mintFenceCredential(
      { resource: "elsewhere/b", token: 1n, holder: "h", validUntil: l.validUntil },
      FENCE_KEYS[0] as (typeof FENCE_KEYS)[number],
    );
    const cases: [string, string, number, string][] = [
      ["truncated", l.fence.slice(0, -3), 400, "/problems/invalid-request"],
      ["re-ordered", [v, id, mac, payload].join("."), 400, "/problems/invalid-request"],
      [
        "another payload, same signature",
        [v, id, Buffer.from(`${MAX_TOKEN}\n${l.holder}\n${l.validUntil}\nsvc/${route}-b`).toString("base64url"), mac].join("."),
        403,
        "/problems/invalid-credential",
      ],
      ["signed with an unknown secret", foreign, 403, "/problems/invalid-credential"],
      ["an unknown key id", [v, "retired", payload, mac].join("."), 403, "/problems/invalid-credential"],
      ["not a credential", "fc2.current.!!.??", 400, "/problems/invalid-request"],
      ["a resource outside the key's scope", otherScope, 403, "/problems/forbidden"],
    ];
    for (const [what, credential, status, type] of cases) {
      const refused = await put(route, `svc/${route}/b`, { "fencing-credential": credential });
      expect(refused.status, what).toBe(status);
      expect(refused.json(), what).toMatchObject({ type });
    }
    // A credential never travels with plain fence headers: they would be ignored, so they are refused.
    const mixed = await put(route, `svc/${route}/b`, { "fencing-credential": l.fence, "fencing-token": MAX_TOKEN.toString() });
    expect(mixed.status).toBe(400);
    expect(await state()).toBe(before);
  });

  it("fuzz: any single-character change to a credential is refused with a 4xx and writes nothing", async () => {
    const l = await lease(`svc/${route}-c`);
    const before = await state();
    await fc.assert(
      fc.asyncProperty(fc.nat(), fc.constantFrom(..."AZaz09-_.xQ"), async (at, c) => {
        const i = at % l.fence.length;
        const changed = l.fence.slice(0, i) + c + l.fence.slice(i + 1);
        fc.pre(changed !== l.fence);
        const refused = await put(route, `svc/${route}/c`, { "fencing-credential": changed });
        expect([400, 403]).toContain(refused.status);
      }),
      { numRuns: 40 },
    );
    expect(await state()).toBe(before);
  });
});

describe("rotation", () => {
  it("a credential signed with the previous key works while that key is configured, and stops when it is removed", async () => {
    const previous = FENCE_KEYS[1] as (typeof FENCE_KEYS)[number];
    const l = await lease("svc/rot");
    const old = mintFenceCredential({ resource: "svc/rot", token: BigInt(l.token), holder: l.holder, validUntil: l.validUntil }, previous);
    expect((await put("records", "svc/records/rot", { "fencing-credential": old })).status).toBe(200);
    const rotated = await runGateway(fixture.backends.gatewayOptions({ fenceKeys: [FENCE_KEYS[0] as (typeof FENCE_KEYS)[number]] }));
    try {
      const res = await rotated.client.send({
        method: "PUT",
        path: "/v1/records/svc/records/rot2",
        headers: { ...bearer(KEYS.service), "content-type": "application/json", "fencing-credential": old },
        body: "1",
      });
      expect(res.status).toBe(403);
      expect(res.json()).toMatchObject({ type: "/problems/invalid-credential", reason: "unknown-key" });
    } finally {
      await rotated.close();
    }
  });
});

describe("fence-on-acquire", () => {
  it("register: true raises every store's ratchet before the lease is answered", async () => {
    const older = await lease("svc/reg");
    await fixture.gw.client.json("POST", "/v1/leases/release", { leaseId: older.leaseId }, bearer(KEYS.service));
    const newer = await lease("svc/reg", true);
    expect(BigInt(newer.token)).toBeGreaterThan(BigInt(older.token));
    // The older holder is refused on keys the newer one never wrote, in both stores.
    for (const route of ["records", "objects"]) {
      const refused = await put(route, `svc/${route}/never-written-${route}`, { "fencing-credential": older.fence });
      expect(refused.status, route).toBe(409);
      expect(refused.json()).toMatchObject({ type: "/problems/stale-token" });
    }
  });
});

describe("fence-on-acquire that outlasts the lease", () => {
  it.each([[["svc/slow/one"]], [["svc/slow/a", "svc/slow/b"]]])(
    "%j: a registration still waiting when the lease ends is 409 lease-lost, never a lease answered already ended",
    async (resources) => {
      const records = fixture.gw.gateway.records;
      const pool = fixture.backends.pool;
      if (records === undefined || pool === undefined) throw new Error("the fixture has PostgreSQL");
      // The last resource's fence row exists, and another transaction holds it: the registration waits for it.
      const last = resources[resources.length - 1] as string;
      await records.register({ resource: last, token: 0n });
      const blocker = await pool.connect();
      try {
        await blocker.query("BEGIN");
        await blocker.query(`SELECT 1 FROM "${fixture.schema}".fence WHERE resource = $1 FOR UPDATE`, [last]);
        const answer = fixture.gw.client.json("POST", "/v1/leases", { resources, ttlMs: 300, register: true }, bearer(KEYS.service));
        await new Promise((resolve) => setTimeout(resolve, 800));
        await blocker.query("COMMIT");
        const res = await answer;
        expect(res.status, res.text()).toBe(409);
        expect(res.json()).toMatchObject({ type: "/problems/lease-lost", resource: resources[0], kind: "expired" });
      } finally {
        blocker.release();
      }
    },
  );
});

describe("a resource whose tokens are used up", () => {
  it("answers 409 token-space-exhausted, final, and leaves no lease behind", async () => {
    const counter = resourceKeys("svc/full").counter;
    await Promise.all(fixture.backends.redisClients.map((c) => c.set(counter, MAX_TOKEN.toString())));
    const res = await fixture.gw.client.json("POST", "/v1/leases", { resource: "svc/full", ttlMs: 10_000 }, bearer(KEYS.service));
    expect(res.status, res.text()).toBe(409);
    expect(res.json()).toMatchObject({ type: "/problems/token-space-exhausted", resource: "svc/full" });
    for (const c of fixture.backends.redisClients) expect(await c.exists(resourceKeys("svc/full").lease)).toBe(0);
  });
});
