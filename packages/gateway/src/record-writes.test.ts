import { describe, expect, it } from "vitest";
import { bearer, KEYS, useGateway, type Answer } from "./test-support.js";

/**
 * POST /v1/records over HTTP, against real PostgreSQL and three lock nodes: several records written
 * in one transaction under the credentials of a lease of several resources, each write under the
 * fence of the resource it names; any refusal writes nothing. PostgreSQL, read directly, shows what
 * was (not) written, and the store's call counter that a refused request never reached it.
 */
const fixture = useGateway({ postgres: true, redis: 3 });

interface LeaseFence {
  readonly resource: string;
  readonly token: string;
  readonly fence: string;
}
interface Granted {
  readonly fences: readonly LeaseFence[];
  readonly holder: string;
  readonly leaseId: string;
  readonly validUntil: number;
}
interface Written {
  readonly writes: readonly { key: string; resource: string; version: string; token: string }[];
}

async function lease(resources: readonly string[], key: string = KEYS.service, register = false): Promise<Granted> {
  const res = await fixture.gw.client.json("POST", "/v1/leases", { resources, ttlMs: 10_000, register }, bearer(key));
  expect(res.status, res.text()).toBe(201);
  return res.json<Granted>();
}
const release = async (l: Granted): Promise<void> => {
  expect((await fixture.gw.client.json("POST", "/v1/leases/release", { leaseId: l.leaseId }, bearer(KEYS.service))).status).toBe(204);
};

const putAll = (body: unknown, headers: Record<string, string> = {}, key: string = KEYS.service): Promise<Answer> =>
  fixture.gw.client.json("POST", "/v1/records", body, { ...bearer(key), ...headers });

const read = async (key: string): Promise<{ status: number; value: unknown; version?: string; token?: string; resource?: string }> => {
  const res = await fixture.gw.client.send({ method: "GET", path: `/v1/records/${key}`, headers: bearer(KEYS.service) });
  if (res.status !== 200) return { status: res.status, value: undefined };
  return {
    status: 200,
    value: res.json(),
    version: String(res.headers.etag).replaceAll('"', ""),
    token: String(res.headers["fencing-token"]),
    resource: decodeURIComponent(String(res.headers["fencing-resource"])),
  };
};

/** The sum of a counter's or histogram count's series in /metrics whose labels start with `labels` (0 before any observation). */
async function metric(name: string, labels: string): Promise<number> {
  const text = (await fixture.gw.client.send({ method: "GET", path: "/metrics" })).text();
  return text
    .split("\n")
    .filter((l) => l.startsWith(`${name}{${labels}`))
    .reduce((sum, l) => sum + Number(l.split(" ")[1]), 0);
}

/** How many times the gateway has called the store's putAll (its duration histogram's count, every outcome). */
const storeCalls = (): Promise<number> => metric("fenced_gateway_store_duration_seconds_count", 'store="records",op="put_all"');

const fencesOf = (l: Granted): string[] => l.fences.map((f) => f.fence);

describe("a transfer between two accounts", () => {
  it("both records in one request, each under its own resource's fence; versions and tokens per write, in order", async () => {
    const l = await lease(["svc/acct/alice", "svc/acct/bob"], KEYS.service, true);
    const [alice, bob] = l.fences as [LeaseFence, LeaseFence];
    const opened = await putAll({
      fences: fencesOf(l),
      writes: [
        { key: "svc/acct/bob/balance", resource: bob.resource, value: { cents: 500 } },
        { key: "svc/acct/alice/balance", resource: alice.resource, value: { cents: 1_000 } },
      ],
    });
    expect(opened.status, opened.text()).toBe(200);
    const first = opened.json<Written>().writes;
    expect(first.map((w) => [w.key, w.resource, w.token])).toEqual([
      ["svc/acct/bob/balance", bob.resource, bob.token],
      ["svc/acct/alice/balance", alice.resource, alice.token],
    ]);
    // The transfer: a compare-and-set on both versions read.
    const moved = await putAll({
      fences: fencesOf(l),
      writes: [
        { key: "svc/acct/alice/balance", resource: alice.resource, value: { cents: 700 }, ifVersion: first[1]?.version },
        { key: "svc/acct/bob/balance", resource: bob.resource, value: { cents: 800 }, ifVersion: first[0]?.version },
      ],
    });
    expect(moved.status, moved.text()).toBe(200);
    expect(await read("svc/acct/alice/balance")).toMatchObject({ value: { cents: 700 }, token: alice.token, resource: alice.resource });
    expect(await read("svc/acct/bob/balance")).toMatchObject({ value: { cents: 800 }, token: bob.token, resource: bob.resource });
    const [a, b] = moved.json<Written>().writes;
    expect((await read("svc/acct/alice/balance")).version).toBe(a?.version);
    expect((await read("svc/acct/bob/balance")).version).toBe(b?.version);

    // Replayed with the versions it was made against: one of them no longer holds, nothing is written.
    const before = await fixture.state();
    const replay = await putAll({
      fences: fencesOf(l),
      writes: [
        { key: "svc/acct/alice/balance", resource: alice.resource, value: { cents: 0 }, ifVersion: a?.version },
        { key: "svc/acct/bob/balance", resource: bob.resource, value: { cents: 1_500 }, ifVersion: first[0]?.version },
      ],
    });
    expect(replay.status, replay.text()).toBe(412);
    expect(replay.json()).toMatchObject({ type: "/problems/version-mismatch", key: "svc/acct/bob/balance", actual: b?.version });
    expect(await fixture.state()).toBe(before);
    await release(l);
  });

  it("one stale credential: 409 stale-token naming its resource, and nothing written — also when no write names it", async () => {
    const l1 = await lease(["svc/stale/alice", "svc/stale/bob"]);
    const [alice1, bob1] = l1.fences as [LeaseFence, LeaseFence];
    const ok = await putAll({
      fences: fencesOf(l1),
      writes: [
        { key: "svc/stale/alice/x", resource: alice1.resource, value: 1 },
        { key: "svc/stale/bob/x", resource: bob1.resource, value: 1 },
      ],
    });
    expect(ok.status, ok.text()).toBe(200);
    await release(l1);
    // The next holder of bob writes: the first lease's bob credential (still within its end) is stale.
    const l2 = await lease(["svc/stale/bob"]);
    expect((await putAll({ fences: fencesOf(l2), writes: [{ key: "svc/stale/bob/x", value: 2 }] })).status).toBe(200);

    const before = await fixture.state();
    for (const writes of [
      [
        { key: "svc/stale/alice/x", resource: alice1.resource, value: 3 },
        { key: "svc/stale/bob/x", resource: bob1.resource, value: 3 },
      ],
      // Only alice written: bob's ratchet is checked all the same, and refuses.
      [{ key: "svc/stale/alice/x", resource: alice1.resource, value: 3 }],
    ]) {
      const refused = await putAll({ fences: fencesOf(l1), writes });
      expect(refused.status, refused.text()).toBe(409);
      expect(refused.json()).toMatchObject({
        type: "/problems/stale-token",
        resource: bob1.resource,
        token: bob1.token,
        highest: l2.fences[0]?.token,
      });
      expect(await fixture.state()).toBe(before);
    }
    expect((await read("svc/stale/alice/x")).value).toBe(1);
    expect((await read("svc/stale/bob/x")).value).toBe(2);
  });

  it("a key of the other resource: 409 resource-mismatch, and the request's other write is not written either", async () => {
    const l = await lease(["svc/own/a", "svc/own/b"]);
    const [a, b] = l.fences as [LeaseFence, LeaseFence];
    const created = await putAll({
      fences: fencesOf(l),
      writes: [
        { key: "svc/own/a/k", resource: a.resource, value: "a" },
        { key: "svc/own/b/k", resource: b.resource, value: "b" },
      ],
    });
    expect(created.status).toBe(200);
    const before = await fixture.state();
    const crossed = await putAll({
      fences: fencesOf(l),
      writes: [
        { key: "svc/own/a/k", resource: a.resource, value: "a2" },
        { key: "svc/own/b/k", resource: a.resource, value: "b by a" },
      ],
    });
    expect(crossed.status, crossed.text()).toBe(409);
    expect(crossed.json()).toMatchObject({
      type: "/problems/resource-mismatch",
      key: "svc/own/b/k",
      resource: a.resource,
      owner: b.resource,
    });
    expect(await fixture.state()).toBe(before);
    await release(l);
  });

  it("one credential: `resource` may be left out; a lease of one resource writes several of its keys", async () => {
    const res = await fixture.gw.client.json("POST", "/v1/leases", { resource: "svc/solo", ttlMs: 10_000 }, bearer(KEYS.service));
    const l = res.json<Granted & { fence: string; token: string }>();
    const written = await putAll({
      fences: [l.fence],
      writes: [
        { key: "svc/solo/1", value: [1] },
        { key: "svc/solo/2", value: null },
      ],
    });
    expect(written.status, written.text()).toBe(200);
    expect(written.json<Written>().writes.map((w) => [w.resource, w.token])).toEqual([
      ["svc/solo", l.token],
      ["svc/solo", l.token],
    ]);
    expect((await read("svc/solo/2")).value).toBeNull();
  });
});

describe("refused before the store is called", () => {
  it("400 for a malformed request, each naming what is wrong; the store is never called and nothing is written", async () => {
    const l = await lease(["svc/bad/a", "svc/bad/b"]);
    const [a, b] = l.fences as [LeaseFence, LeaseFence];
    const fences = fencesOf(l);
    const w = (key: string, resource: string | undefined, value: unknown = 1): Record<string, unknown> =>
      resource === undefined ? { key, value } : { key, resource, value };
    const cases: [unknown, RegExp, Record<string, string>?][] = [
      [{ writes: [w("svc/bad/a/1", a.resource)] }, /fences/],
      [{ fences, writes: [] }, /writes/],
      [{ fences: [], writes: [w("svc/bad/a/1", a.resource)] }, /fences/],
      [{ fences, writes: [w("svc/bad/a/1", a.resource), w("svc/bad/a/1", a.resource)] }, /writes\.1\.key: repeats/],
      [{ fences, writes: [w("svc/bad/a/../x", a.resource)] }, /writes\.0\.key: a key/],
      [{ fences, writes: [w("svc/bad/a/1", undefined)] }, /writes\.0\.resource: required with several fences/],
      [{ fences, writes: [w("svc/bad/c/1", "svc/bad/c")] }, /writes\.0\.resource: "svc\/bad\/c" is not a resource of `fences`/],
      [{ fences: [a.fence, a.fence], writes: [w("svc/bad/a/1", a.resource)] }, /fences\.1: a second credential for "svc\/bad\/a"/],
      [
        { fences: [a.fence, `fc2.current.YR.${"A".repeat(43)}`], writes: [w("svc/bad/a/1", a.resource)] },
        /fences\.1: not a fence credential/,
      ],
      [{ fences, writes: [{ key: "svc/bad/a/1", resource: a.resource }] }, /writes\.0\.value: a JSON value is required/],
      [{ fences, writes: [{ ...w("svc/bad/a/1", a.resource), ifVersion: "v1" }] }, /writes\.0\.ifVersion/],
      [{ fences, writes: [{ ...w("svc/bad/a/1", a.resource), extra: 1 }] }, /extra/],
      [{ fences, writes: [w("svc/bad/a/1", a.resource)] }, /fencing-credential: not taken/, { "fencing-credential": a.fence }],
      [{ fences, writes: [w("svc/bad/a/1", a.resource)] }, /if-match: not taken/, { "if-match": '"1"' }],
      [{ fences, writes: [w("svc/bad/b/1", b.resource)] }, /fencing-token: not taken/, { "fencing-token": b.token }],
      [{ fences: [a.fence, 7], writes: [w("svc/bad/a/1", a.resource)] }, /fences\.1/],
    ];
    // A good request reaches the store (and shows in its call count); none of the bad ones below does.
    expect((await putAll({ fences, writes: [w("svc/bad/a/0", a.resource)] })).status).toBe(200);
    const before = await fixture.state();
    const calls = await storeCalls();
    expect(calls).toBeGreaterThan(0);
    for (const [body, reason, headers] of cases) {
      const res = await putAll(body, headers);
      expect(res.status, `${JSON.stringify(body).slice(0, 200)}: ${res.text()}`).toBe(400);
      expect(res.json()).toMatchObject({ type: "/problems/invalid-request" });
      expect(res.json<{ detail: string }>().detail).toMatch(reason);
    }
    const notJson = await fixture.gw.client.send({
      method: "POST",
      path: "/v1/records",
      headers: { ...bearer(KEYS.service), "content-type": "text/plain" },
      body: "{}",
    });
    expect(notJson.status).toBe(415);
    const tooLarge = await putAll({ fences, writes: [w("svc/bad/a/1", a.resource, "x".repeat(1024 * 1024))] });
    expect(tooLarge.status).toBe(413);
    expect(await storeCalls()).toBe(calls);
    expect(await fixture.state()).toBe(before);
    // A value jsonb refuses (U+0000): the store's own check, the gateway has no copy of it. It runs
    // before any I/O, and the answer names the write's value in the gateway's one path spelling.
    const badValue = await putAll({ fences, writes: [w("svc/bad/a/0", a.resource, 2), w("svc/bad/a/1", a.resource, "nul \u0000")] });
    expect(badValue.status).toBe(400);
    const problem = badValue.json<{ type: string; detail: string; errors: { path: string; message: string }[] }>();
    expect(problem.type).toBe("/problems/invalid-request");
    expect(problem.detail).toMatch(/^writes\.1\.value: /);
    expect(problem.errors).toEqual([{ path: "writes.1.value", message: problem.detail.slice("writes.1.value: ".length) }]);
    expect(await fixture.state()).toBe(before);
  });

  it("401, and 403 for a read-only key, a key or a credential's resource outside the API key, a forged or ended credential", async () => {
    const l = await lease(["svc/auth/a", "svc/auth/b"]);
    const [a] = l.fences as [LeaseFence, LeaseFence];
    const outside = await lease(["team-a/auth/x"], KEYS.admin);
    const [version, keyId, payload, mac] = a.fence.split(".") as [string, string, string, string];
    const forged = [version, keyId, payload, `${mac.startsWith("A") ? "B" : "A"}${mac.slice(1)}`].join(".");
    // Long enough to be granted on a loaded machine (a grant needs validity left after its own round), then left to end.
    const ended = await fixture.gw.client.json("POST", "/v1/leases", { resource: "svc/auth/ended", ttlMs: 500 }, bearer(KEYS.service));
    expect(ended.status, ended.text()).toBe(201);
    const endedFence = ended.json<{ fence: string }>().fence;
    await new Promise((resolve) => setTimeout(resolve, 800));
    const write = { key: "svc/auth/a/1", resource: a.resource, value: 1 };
    const before = await fixture.state();
    const calls = await storeCalls();
    const unauthenticated = await fixture.gw.client.json("POST", "/v1/records", { fences: fencesOf(l), writes: [write] });
    expect(unauthenticated.status).toBe(401);
    for (const [body, key, type] of [
      [{ fences: fencesOf(l), writes: [write] }, KEYS.reader, "/problems/forbidden"],
      [
        { fences: fencesOf(l), writes: [write, { key: "team-a/auth/x/1", resource: a.resource, value: 1 }] },
        KEYS.service,
        "/problems/forbidden",
      ],
      [{ fences: [...fencesOf(l), ...fencesOf(outside)], writes: [write] }, KEYS.service, "/problems/forbidden"],
      [{ fences: [forged], writes: [write] }, KEYS.service, "/problems/invalid-credential"],
      [{ fences: [endedFence], writes: [{ key: "svc/auth/ended/1", value: 1 }] }, KEYS.service, "/problems/credential-expired"],
    ] as const) {
      const res = await putAll(body, {}, key);
      expect(res.status, res.text()).toBe(403);
      expect(res.json()).toMatchObject({ type });
    }
    expect(await storeCalls()).toBe(calls);
    expect(await fixture.state()).toBe(before);
  });

  it("/v1/records itself serves POST only (405 with Allow); /v1/records/ is still a key route (an empty key, 400)", async () => {
    const get = await fixture.gw.client.send({ method: "GET", path: "/v1/records", headers: bearer(KEYS.service) });
    expect(get.status).toBe(405);
    expect(get.headers.allow).toBe("POST");
    const slash = await fixture.gw.client.send({ method: "GET", path: "/v1/records/", headers: bearer(KEYS.service) });
    expect(slash.status).toBe(400);
    const postKey = await fixture.gw.client.json("POST", "/v1/records/svc/x", {}, bearer(KEYS.service));
    expect(postKey.status).toBe(405);
  });

  it("counted in the metrics as one write of op put_all: accepted, or rejected with its reason", async () => {
    const accepted = () => metric("fenced_gateway_writes_accepted_total", 'store="records",op="put_all"}');
    const rejected = () => metric("fenced_gateway_writes_rejected_total", 'store="records",op="put_all",reason="invalid_request"}');
    const [accepted0, rejected0] = [await accepted(), await rejected()];
    const l = await lease(["svc/metrics/a"]);
    expect((await putAll({ fences: fencesOf(l), writes: [{ key: "svc/metrics/a/1", value: 1 }] })).status).toBe(200);
    expect((await putAll({ fences: fencesOf(l), writes: [] })).status).toBe(400);
    expect(await accepted()).toBe(accepted0 + 1);
    expect(await rejected()).toBe(rejected0 + 1);
  });
});
