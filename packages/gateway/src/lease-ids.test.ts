import { setTimeout as sleep } from "node:timers/promises";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { MAX_TOKEN } from "@fenced/fence";
import { resourceKeys } from "@fenced/lock";
import { expectStillHeld, heldOnQuorum, valuesOf } from "./lock-nodes-test-support.js";
import { bearer, KEYS, useGateway, type Answer } from "./test-support.js";

/**
 * Nothing a client sends becomes part of a signed credential unless the gateway sealed it before or
 * the lock confirms it: an ordinary API key that edits its own lease id gets no credential for another
 * token, resource or holder, and a credential stops writing at its lease's end. PostgreSQL and S3,
 * read directly, show what was (not) written.
 */
const fixture = useGateway({ postgres: true, s3: true, redis: 3 });

const state = (): Promise<string> => fixture.state();

interface Granted {
  readonly resource: string;
  readonly token: string;
  readonly holder: string;
  readonly leaseId: string;
  readonly fence: string;
  readonly validUntil: number;
}

const FIELDS = { token: 0, value: 1, end: 2, resource: 3 } as const;

/** The lease id with one sealed field replaced, its seal kept: what a client can do to its own id. */
function edited(leaseId: string, field: keyof typeof FIELDS, to: string): string {
  const [version, keyId, payload, mac] = leaseId.split(".") as [string, string, string, string];
  const fields = Buffer.from(payload, "base64url").toString("utf8").split("\n");
  fields[FIELDS[field]] = to;
  return [version, keyId, Buffer.from(fields.join("\n"), "utf8").toString("base64url"), mac].join(".");
}

async function lease(resource: string, ttlMs: number, register = false): Promise<Granted> {
  const res = await fixture.gw.client.json("POST", "/v1/leases", { resource, ttlMs, register }, bearer(KEYS.service));
  expect(res.status, res.text()).toBe(201);
  return res.json<Granted>();
}

const extend = (leaseId: string, ttlMs = 10_000): Promise<Answer> =>
  fixture.gw.client.json("POST", "/v1/leases/extend", { leaseId, ttlMs }, bearer(KEYS.service));
const release = (leaseId: string): Promise<Answer> =>
  fixture.gw.client.json("POST", "/v1/leases/release", { leaseId }, bearer(KEYS.service));
const put = (route: string, key: string, credential: string, body: string): Promise<Answer> =>
  fixture.gw.client.send({
    method: "PUT",
    path: `/v1/${route}/${key}`,
    headers: { ...bearer(KEYS.service), "content-type": "application/json", "fencing-credential": credential },
    body,
  });
const read = async (route: string, key: string): Promise<string> =>
  (await fixture.gw.client.send({ method: "GET", path: `/v1/${route}/${key}`, headers: bearer(KEYS.service) })).text();

describe.each(["records", "objects"])("%s", (route) => {
  it("an edited lease id earns no credential: a released holder cannot overwrite the next holder, who keeps writing", async () => {
    const resource = `svc/${route}-edit`;
    const key = `svc/${route}/edit`;
    const first = await lease(resource, 10_000);
    for (const token of [BigInt(first.token) + 100n, MAX_TOKEN]) {
      const answer = await extend(edited(first.leaseId, "token", token.toString()), 60_000);
      expect(answer.status, answer.text()).toBe(403);
      expect(answer.json()).toMatchObject({ type: "/problems/invalid-lease-id", reason: "bad-signature" });
      expect(answer.text()).not.toContain("fc2.");
    }
    // The edited ids did not extend the lease either (they asked for 60 s): its keys end within the first TTL.
    for (const r of fixture.backends.redisClients) expect(await r.pttl(resourceKeys(resource).lease)).toBeLessThanOrEqual(10_000);

    expect((await release(first.leaseId)).status).toBe(204);
    const second = await lease(resource, 10_000, true);
    expect(BigInt(second.token)).toBeGreaterThan(BigInt(first.token));
    expect((await put(route, key, second.fence, '"second"')).status).toBe(200);
    // The first client has nothing but its own, older credential: refused by the storage's ratchet.
    const overwrite = await put(route, key, first.fence, '"first"');
    expect(overwrite.status, overwrite.text()).toBe(409);
    expect(overwrite.json()).toMatchObject({ type: "/problems/stale-token", highest: second.token });
    expect(await read(route, key)).toBe('"second"');
    expect((await put(route, key, second.fence, '"second again"')).status).toBe(200);
    expect(await read(route, key)).toBe('"second again"');
  });

  it("a credential is refused after its lease's end and writes nothing; one extended in time keeps writing with the new credential", async () => {
    const [lapsed, kept] = await Promise.all([lease(`svc/${route}-lapse`, 1_500), lease(`svc/${route}-kept`, 1_500)]);
    await sleep(Math.max(0, kept.validUntil - Date.now() - 700));
    const extended = await extend(kept.leaseId, 5_000);
    expect(extended.status, extended.text()).toBe(200);
    const renewed = extended.json<Granted>();
    expect(renewed.fence).not.toBe(kept.fence);
    expect(renewed).toMatchObject({ resource: kept.resource, token: kept.token, holder: kept.holder });
    expect(renewed.validUntil).toBeGreaterThan(kept.validUntil);

    await sleep(Math.max(lapsed.validUntil, kept.validUntil) + 1_500 - Date.now());
    const before = await state();
    const refused = await put(route, `svc/${route}/lapse`, lapsed.fence, '"late"');
    expect(refused.status, refused.text()).toBe(403);
    expect(refused.json()).toMatchObject({
      type: "/problems/credential-expired",
      resource: `svc/${route}-lapse`,
      token: lapsed.token,
      expiredAt: lapsed.validUntil,
    });
    // The extended lease's first credential ended with its first validUntil; the new one writes.
    expect((await put(route, `svc/${route}/kept`, kept.fence, '"old"')).status).toBe(403);
    expect(await state()).toBe(before);
    expect((await put(route, `svc/${route}/kept`, renewed.fence, '"new"')).status).toBe(200);
    expect(await read(route, `svc/${route}/kept`)).toBe('"new"');
    // A lease id past its end is not extended either: the lock is not asked.
    const late = await extend(lapsed.leaseId);
    expect(late.status).toBe(409);
    expect(late.json()).toMatchObject({ type: "/problems/lease-lost", kind: "expired" });
  });
});

describe("lease id mutations", () => {
  it("token, value, resource or end edited one at a time, or any character changed: a 4xx, no credential, the lease untouched", async () => {
    const l = await lease("svc/mutate", 30_000);
    const before = await heldOnQuorum(fixture.backends.redisClients, "svc/mutate");
    const value = Buffer.from(l.leaseId.split(".")[2] as string, "base64url")
      .toString("utf8")
      .split("\n")[1] as string;
    const fieldEdit = fc.oneof(
      fc.bigInt({ min: 0n, max: MAX_TOKEN }).map((t) => edited(l.leaseId, "token", t.toString())),
      fc.stringMatching(/^[0-9a-f]{32}$/).map((v) => edited(l.leaseId, "value", v)),
      fc.constantFrom("svc/mutate-x", "svc/other", "svc/Mutate").map((r) => edited(l.leaseId, "resource", r)),
      fc.integer({ min: l.validUntil + 1, max: l.validUntil + 10 ** 9 }).map((end) => edited(l.leaseId, "end", end.toString())),
    );
    const characterEdit = fc.tuple(fc.nat(), fc.constantFrom(..."AZaz09-_.xQ")).map(([at, c]) => {
      const i = at % l.leaseId.length;
      return l.leaseId.slice(0, i) + c + l.leaseId.slice(i + 1);
    });
    await fc.assert(
      fc.asyncProperty(fc.oneof(fieldEdit, characterEdit), fc.boolean(), async (id, releasing) => {
        fc.pre(id !== l.leaseId);
        const answer = releasing ? await release(id) : await extend(id, 60_000);
        expect([400, 403], answer.text()).toContain(answer.status);
        expect(answer.text()).not.toContain("fc2.");
      }),
      { numRuns: 60 },
    );
    // Neither released nor extended, on any node, by any of them.
    expect(valuesOf(before)[0]).toBe(value);
    await expectStillHeld(fixture.backends.redisClients, "svc/mutate", before, 30_000);
  });
});

describe("scope", () => {
  it("a lease id names its resource: an API key outside it neither extends nor releases the lease", async () => {
    const granted = await fixture.gw.client.json("POST", "/v1/leases", { resource: "team-b/x", ttlMs: 10_000 }, bearer(KEYS.admin));
    expect(granted.status).toBe(201);
    const { leaseId } = granted.json<Granted>();
    const before = await heldOnQuorum(fixture.backends.redisClients, "team-b/x");
    for (const [path, body] of [
      ["/v1/leases/extend", { leaseId, ttlMs: 60_000 }],
      ["/v1/leases/release", { leaseId }],
    ] as const) {
      const refused = await fixture.gw.client.json("POST", path, body, bearer(KEYS.teamA));
      expect(refused.status, path).toBe(403);
      expect(refused.json()).toMatchObject({ type: "/problems/forbidden" });
    }
    // Neither extended nor released on any node.
    await expectStillHeld(fixture.backends.redisClients, "team-b/x", before, 10_000);
  });
});
