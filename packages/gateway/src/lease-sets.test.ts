import { describe, expect, it } from "vitest";
import { MAX_RESOURCES } from "@fenced/fence";
import { expectStillHeld, heldOnQuorum, leaseOnNodes, settledOnEvery, valuesOf, type NodeKey } from "./lock-nodes-test-support.js";
import { bearer, KEYS, useGateway, type Answer } from "./test-support.js";

/**
 * Leases of several resources over HTTP, against real PostgreSQL, S3 and three lock nodes: one lease,
 * a token and a credential per resource, each credential good for its own resource only; a lease id
 * that seals them all, extended and released whole; sets taken all or none; fence-on-acquire for each.
 */
const fixture = useGateway({ postgres: true, s3: true, redis: 3 });

interface LeaseFence {
  readonly resource: string;
  readonly token: string;
  readonly fence: string;
}
interface Granted {
  readonly fence: string;
  readonly resource: string;
  readonly token: string;
  readonly fences: readonly LeaseFence[];
  readonly holder: string;
  readonly leaseId: string;
  readonly validUntil: number;
}

const ask = (body: unknown, key: string = KEYS.service): Promise<Answer> => fixture.gw.client.json("POST", "/v1/leases", body, bearer(key));

async function lease(resources: readonly string[], options: { ttlMs?: number; register?: boolean } = {}): Promise<Granted> {
  const res = await ask({ resources, ttlMs: options.ttlMs ?? 10_000, register: options.register ?? false });
  expect(res.status, res.text()).toBe(201);
  return res.json<Granted>();
}

const extend = (leaseId: string, ttlMs = 10_000, key: string = KEYS.service): Promise<Answer> =>
  fixture.gw.client.json("POST", "/v1/leases/extend", { leaseId, ttlMs }, bearer(key));
const release = (leaseId: string, key: string = KEYS.service): Promise<Answer> =>
  fixture.gw.client.json("POST", "/v1/leases/release", { leaseId }, bearer(key));
const write = (route: string, key: string, credential: string, body = '"v"'): Promise<Answer> =>
  fixture.gw.client.send({
    method: "PUT",
    path: `/v1/${route}/${key}`,
    headers: { ...bearer(KEYS.service), "content-type": "application/json", "fencing-credential": credential },
    body,
  });

const redis = () => fixture.backends.redisClients;
const held = (resource: string): Promise<NodeKey[]> => leaseOnNodes(redis(), resource);
const freed = (node: NodeKey): boolean => node.value === null;

/** The lease id with its payload's fields replaced, its seal kept: what a client can do to its own id. */
function edited(leaseId: string, edit: (fields: string[]) => string[]): string {
  const [version, keyId, payload, mac] = leaseId.split(".") as [string, string, string, string];
  const fields = edit(Buffer.from(payload, "base64url").toString("utf8").split("\n"));
  return [version, keyId, Buffer.from(fields.join("\n"), "utf8").toString("base64url"), mac].join(".");
}

describe("a lease of several resources", () => {
  it("is one lease with a token and a credential per resource, in the order asked; fence, resource and token are the first's", async () => {
    // Tokens are counted per resource: b has been leased before, a has not.
    const before = await ask({ resource: "svc/set1/b", ttlMs: 1_000 });
    expect(before.status).toBe(201);
    expect((await release(before.json<Granted>().leaseId)).status).toBe(204);
    const l = await lease(["svc/set1/b", "svc/set1/a"]);
    expect(l.fences.map((f) => f.resource)).toEqual(["svc/set1/b", "svc/set1/a"]);
    expect(BigInt(l.fences[0]?.token ?? "0")).toBeGreaterThan(BigInt(before.json<Granted>().token));
    expect(l).toMatchObject({ resource: "svc/set1/b", token: l.fences[0]?.token, fence: l.fences[0]?.fence });
    expect(l.fences[0]?.fence).not.toBe(l.fences[1]?.fence);
    expect(l.leaseId.startsWith("fl2.")).toBe(true);
    // One lease: one value under both resources' keys, on a quorum of nodes, and no other value on any.
    const [b, a] = await Promise.all([heldOnQuorum(redis(), "svc/set1/b"), heldOnQuorum(redis(), "svc/set1/a")]);
    expect(new Set(valuesOf([...a, ...b])).size).toBe(1);
  });

  it("of one resource keeps its answer and id: `fences` holds its one fence, and resources: [r] is the same lease", async () => {
    for (const body of [
      { resource: "svc/one/x", ttlMs: 5_000 },
      { resources: ["svc/one/y"], ttlMs: 5_000 },
    ]) {
      const res = await ask(body);
      expect(res.status, res.text()).toBe(201);
      const l = res.json<Granted>();
      expect(l.fences).toEqual([{ resource: l.resource, token: l.token, fence: l.fence }]);
      expect(l.leaseId.startsWith("fl1.")).toBe(true);
      expect((await extend(l.leaseId)).status).toBe(200);
      expect((await release(l.leaseId)).status).toBe(204);
    }
  });

  describe.each(["records", "objects"])("%s", (route) => {
    it("each credential writes under its own resource, and is refused on a key of the other's", async () => {
      const l = await lease([`svc/${route}-own/a`, `svc/${route}-own/b`]);
      const [a, b] = l.fences as [LeaseFence, LeaseFence];
      const keyA = `svc/${route}-own/a/balance`;
      const keyB = `svc/${route}-own/b/balance`;
      expect((await write(route, keyA, a.fence, "100")).json()).toMatchObject({ token: a.token });
      expect((await write(route, keyB, b.fence, "200")).json()).toMatchObject({ token: b.token });
      // The key is b's: a's credential (another resource of the same lease) does not write it.
      const before = await fixture.state();
      const crossed = await write(route, keyB, a.fence, "0");
      expect(crossed.status, crossed.text()).toBe(409);
      expect(crossed.json()).toMatchObject({ type: "/problems/resource-mismatch", key: keyB, resource: a.resource, owner: b.resource });
      expect(await fixture.state()).toBe(before);
      // Each read names the resource that wrote it and that resource's token.
      const read = await fixture.gw.client.send({ method: "GET", path: `/v1/${route}/${keyA}`, headers: bearer(KEYS.service) });
      expect(read.headers["fencing-resource"]).toBe(encodeURIComponent(a.resource).replaceAll("%2F", "/"));
      expect(read.headers["fencing-token"]).toBe(a.token);
      expect(read.headers["fencing-holder"]).toBe(l.holder);
    });
  });

  it("a credential of a resource outside the writer's API key is refused (403), whatever else its lease holds", async () => {
    const granted = await ask({ resources: ["team-a/s/x", "svc/s/x"], ttlMs: 10_000 }, KEYS.admin);
    expect(granted.status, granted.text()).toBe(201);
    const [teamA, svc] = granted.json<Granted>().fences as [LeaseFence, LeaseFence];
    expect((await write("records", "svc/s/x/k", svc.fence)).status).toBe(200);
    const refused = await write("records", "svc/s/x/k2", teamA.fence);
    expect(refused.status).toBe(403);
    expect(refused.json()).toMatchObject({ type: "/problems/forbidden" });
  });
});

describe("a set's lease id", () => {
  it("extends every resource at once, with the same tokens and a new credential for each; released, every key is gone", async () => {
    const l = await lease(["svc/ext/a", "svc/ext/b", "svc/ext/c"], { ttlMs: 2_000 });
    const extended = await extend(l.leaseId, 30_000);
    expect(extended.status, extended.text()).toBe(200);
    const e = extended.json<Granted>();
    expect(e.fences.map((f) => [f.resource, f.token])).toEqual(l.fences.map((f) => [f.resource, f.token]));
    expect(e.holder).toBe(l.holder);
    expect(e.validUntil).toBeGreaterThan(l.validUntil);
    e.fences.forEach((f, i) => expect(f.fence).not.toBe(l.fences[i]?.fence));
    expect(e.leaseId).not.toBe(l.leaseId);
    for (const r of ["svc/ext/a", "svc/ext/b", "svc/ext/c"]) await heldOnQuorum(redis(), r, (n) => n.pttl > 2_000);
    // The new credentials write; so does the new id extend.
    expect((await write("records", "svc/ext/c/k", e.fences[2]?.fence ?? "")).status).toBe(200);
    expect((await extend(e.leaseId, 30_000)).status).toBe(200);

    expect((await release(e.leaseId)).status).toBe(204);
    for (const r of ["svc/ext/a", "svc/ext/b", "svc/ext/c"])
      for (const node of await settledOnEvery(redis(), r, freed)) expect(node.value, r).toBeNull();
    // Released whole: the set is free again at once, and its tokens went up per resource.
    const again = await lease(["svc/ext/c", "svc/ext/a"]);
    expect(BigInt(again.fences[0]?.token ?? "0")).toBeGreaterThan(BigInt(l.fences[2]?.token ?? "0"));
    expect((await release(again.leaseId)).status).toBe(204);
  });

  it("edited, reordered, cut or forged: refused (4xx) with no credential, and the lease untouched", async () => {
    // a's token above b's, so that swapping them changes the id.
    const earlier = await ask({ resource: "svc/forge/a", ttlMs: 1_000 });
    expect((await release(earlier.json<Granted>().leaseId)).status).toBe(204);
    const l = await lease(["svc/forge/a", "svc/forge/b"], { ttlMs: 20_000 });
    expect(l.fences[0]?.token).not.toBe(l.fences[1]?.token);
    const before = { a: await heldOnQuorum(redis(), "svc/forge/a"), b: await heldOnQuorum(redis(), "svc/forge/b") };
    const [leaseValue, end, tokenA, resourceA, tokenB, resourceB] = Buffer.from(l.leaseId.split(".")[2] ?? "", "base64url")
      .toString("utf8")
      .split("\n") as [string, string, string, string, string, string];
    expect([resourceA, resourceB]).toEqual(["svc/forge/a", "svc/forge/b"]);
    const forgeries = {
      "a token raised": edited(l.leaseId, (f) => f.with(4, (BigInt(tokenB) + 100n).toString())),
      "tokens swapped": edited(l.leaseId, (f) => f.with(2, tokenB).with(4, tokenA)),
      "a resource renamed": edited(l.leaseId, (f) => f.with(5, "svc/forge/c")),
      "a resource added": edited(l.leaseId, (f) => [...f, "1", "svc/forge/c"]),
      "the end moved": edited(l.leaseId, (f) => f.with(1, String(Number(end) + 60_000))),
      "the value changed": edited(l.leaseId, (f) => f.with(0, leaseValue.replace(/^./, leaseValue.startsWith("0") ? "1" : "0"))),
      "a resource dropped": edited(l.leaseId, (f) => f.slice(0, 4)),
      "read as one resource's id": edited(l.leaseId.replace(/^fl2/, "fl1"), () => [tokenA, leaseValue, end, resourceA]),
    };
    for (const [what, id] of Object.entries(forgeries)) {
      for (const answer of [await extend(id, 60_000), await release(id)]) {
        expect([400, 403], `${what}: ${answer.text()}`).toContain(answer.status);
        expect(answer.text()).not.toContain("fc2.");
      }
    }
    expect((await extend(forgeries["a token raised"], 60_000)).json()).toMatchObject({ type: "/problems/invalid-lease-id" });
    // Neither extended (they asked for 60 s) nor released, on any node, by any of them.
    expect(valuesOf(before.a)[0]).toBe(leaseValue);
    await expectStillHeld(redis(), "svc/forge/a", before.a, 20_000);
    await expectStillHeld(redis(), "svc/forge/b", before.b, 20_000);
    expect((await release(l.leaseId)).status).toBe(204);
  });

  it("names every resource: an API key that covers only some of them neither extends nor releases it", async () => {
    const granted = await ask({ resources: ["team-a/both", "team-b/both"], ttlMs: 10_000 }, KEYS.admin);
    expect(granted.status).toBe(201);
    const { leaseId } = granted.json<Granted>();
    const before = { a: await heldOnQuorum(redis(), "team-a/both"), b: await heldOnQuorum(redis(), "team-b/both") };
    for (const answer of [await extend(leaseId, 60_000, KEYS.teamA), await release(leaseId, KEYS.teamA)]) {
      expect(answer.status).toBe(403);
      expect(answer.json()).toMatchObject({ type: "/problems/forbidden" });
    }
    await expectStillHeld(redis(), "team-a/both", before.a, 10_000);
    await expectStillHeld(redis(), "team-b/both", before.b, 10_000);
    expect((await release(leaseId, KEYS.admin)).status).toBe(204);
  });
});

describe("sets are taken all or none", () => {
  it("a set overlapping a held lease is refused (409 lock-held, naming the set) and takes none of its resources", async () => {
    const first = await lease(["svc/ov/a", "svc/ov/b"]);
    for (const resources of [
      ["svc/ov/b", "svc/ov/c"],
      ["svc/ov/c", "svc/ov/a"],
      ["svc/ov/a", "svc/ov/b"],
    ]) {
      const refused = await ask({ resources, ttlMs: 10_000 });
      expect(refused.status, refused.text()).toBe(409);
      expect(refused.headers["retry-after"]).toBe("1");
      expect(refused.json()).toMatchObject({ type: "/problems/lock-held", resource: resources[0], resources });
    }
    const single = await ask({ resource: "svc/ov/b", ttlMs: 10_000 });
    expect(single.json()).toMatchObject({ type: "/problems/lock-held", resource: "svc/ov/b" });
    expect(single.json()).not.toHaveProperty("resources");
    // c was never taken by the refused sets: no key on any node, and a lease of it is granted at once.
    for (const node of await held("svc/ov/c")) expect(node.value).toBeNull();
    const c = await ask({ resource: "svc/ov/c", ttlMs: 10_000 });
    expect(c.status).toBe(201);
    expect((await release(c.json<Granted>().leaseId)).status).toBe(204);
    // Released, the set is free for the overlapping one.
    expect((await release(first.leaseId)).status).toBe(204);
    expect((await ask({ resources: ["svc/ov/b", "svc/ov/c"], ttlMs: 10_000 })).status).toBe(201);
  });
});

describe("register: true", () => {
  it("registers every fence with every store: an older lease's writes are refused under either resource", async () => {
    const [oldA, oldB] = [await ask({ resource: "svc/reg/a", ttlMs: 20_000 }), await ask({ resource: "svc/reg/b", ttlMs: 20_000 })];
    const [a0, b0] = [oldA.json<Granted>(), oldB.json<Granted>()];
    for (const l of [a0, b0]) expect((await release(l.leaseId)).status).toBe(204);
    const l = await lease(["svc/reg/a", "svc/reg/b"], { register: true });
    for (const f of l.fences) {
      const fences = await fixture.gw.client.send({ method: "GET", path: `/v1/fences/${f.resource}`, headers: bearer(KEYS.service) });
      const stored = { token: f.token, holder: l.holder };
      expect(fences.json()).toEqual({ resource: f.resource, stores: { postgres: stored, s3: stored } });
    }
    // The older leases never wrote; their credentials (still within their TTL) are refused all the same.
    const before = await fixture.state();
    for (const route of ["records", "objects"])
      for (const [old, fence] of [
        [a0, l.fences[0]],
        [b0, l.fences[1]],
      ] as const) {
        const stale = await write(route, `${old.resource}/k`, old.fence);
        expect(stale.status, stale.text()).toBe(409);
        expect(stale.json()).toMatchObject({
          type: "/problems/stale-token",
          resource: old.resource,
          token: old.token,
          highest: fence?.token,
        });
      }
    expect(await fixture.state()).toBe(before);
  });
});

describe("register: true, refused", () => {
  it("a store that has admitted a higher token of one resource: 409 stale-token, and the whole set released", async () => {
    await fixture.gw.gateway.records?.register({ resource: "svc/reg2/b", token: 1_000_000n });
    const refused = await ask({ resources: ["svc/reg2/a", "svc/reg2/b"], ttlMs: 10_000, register: true });
    expect(refused.status, refused.text()).toBe(409);
    expect(refused.json()).toMatchObject({ type: "/problems/stale-token", resource: "svc/reg2/b", highest: "1000000" });
    for (const r of ["svc/reg2/a", "svc/reg2/b"])
      for (const node of await settledOnEvery(redis(), r, freed)) expect(node.value, r).toBeNull();
    // PostgreSQL raised none of the set's ratchets (all or none): a's is still unwritten there.
    const a = await fixture.gw.client.send({ method: "GET", path: "/v1/fences/svc/reg2/a", headers: bearer(KEYS.service) });
    expect(a.json()).toMatchObject({ stores: { postgres: null } });
  });
});

describe("bad sets and scope", () => {
  it("400 with the reason, and nothing taken: both or neither field, empty, repeated, too many, malformed, too long", async () => {
    const cases: [unknown, RegExp][] = [
      [{ resource: "svc/bad/a", resources: ["svc/bad/b"], ttlMs: 1_000 }, /not both/],
      [{ ttlMs: 1_000 }, /give resource .* or resources/],
      [{ resources: [], ttlMs: 1_000 }, /at least one resource/],
      [{ resources: ["svc/bad/a", "svc/bad/a"], ttlMs: 1_000 }, /repeats "svc\/bad\/a"/],
      [{ resources: Array.from({ length: MAX_RESOURCES + 1 }, (_, i) => `svc/bad/${i}`), ttlMs: 1_000 }, /at most 64 resources, got 65/],
      [{ resources: ["svc/bad/a", 7], ttlMs: 1_000 }, /resources\.1/],
      [{ resources: ["svc/bad/a", "svc/bad/\n"], ttlMs: 1_000 }, /control characters/],
      [{ resources: "svc/bad/a", ttlMs: 1_000 }, /resources/],
      [{ resources: ["svc/bad/a"], ttlMs: 1_000, extra: 1 }, /extra/],
      // 9 + 3 × 512 bytes: each resource valid, the set one past what a lease id can carry.
      [
        { resources: ["svc/bad/a", ...["b", "c", "d"].map((c) => `svc/bad/${c.repeat(504)}`)], ttlMs: 1_000 },
        /resources must total at most 1536 bytes of UTF-8 \(a lease id carries them all\), got 1545/,
      ],
    ];
    for (const [body, reason] of cases) {
      const res = await ask(body);
      expect(res.status, JSON.stringify(body).slice(0, 200)).toBe(400);
      expect(res.json()).toMatchObject({ type: "/problems/invalid-request" });
      expect(res.json<{ detail: string }>().detail).toMatch(reason);
    }
    for (const node of await held("svc/bad/a")) expect(node.value).toBeNull();
  });

  it("403 when any resource of the set is outside the API key's scope, and nothing taken", async () => {
    const refused = await ask({ resources: ["svc/scope/a", "team-a/scope/b"], ttlMs: 10_000 });
    expect(refused.status).toBe(403);
    expect(refused.json()).toMatchObject({ type: "/problems/forbidden" });
    expect(refused.text()).toContain("team-a/scope/b");
    for (const node of await held("svc/scope/a")) expect(node.value).toBeNull();
    const reader = await ask({ resources: ["svc/scope/a", "svc/scope/b"], ttlMs: 10_000 }, KEYS.reader);
    expect(reader.status).toBe(403);
  });
});
