import { describe, expect, it } from "vitest";
import { KEYS, useGateway, writeHeaders } from "./test-support.js";

/**
 * Over HTTP, the fence's identity is what the stores check: the resource a key belongs to, and the
 * holder that presented a token. A client that names another resource in its scope, or presents an
 * equal token under another holder id, is refused with nothing written — on both stores.
 */
const fixture = useGateway({ postgres: true, s3: true });

const stores = [
  { route: "records", body: '{"total":120}', contentType: "application/json", other: '{"total":0}' },
  { route: "objects", body: "invoice v1", contentType: "text/plain", other: "overwritten" },
] as const;

const state = (): Promise<string> => fixture.state();

describe.each(stores)("$route", ({ route, body, contentType, other }) => {
  it("a key written under one resource refuses writes, deletes and If-Match writes naming another (409 resource-mismatch)", async () => {
    const c = fixture.gw.client;
    const path = `/v1/${route}/shared/${route}-owned`;
    const owner = { "fencing-resource": "orders/42", "content-type": contentType };
    const put = await c.send({ method: "PUT", path, headers: writeHeaders(KEYS.admin, 34n, owner), body });
    expect(put.status, put.text()).toBe(200);
    const version = put.json<{ version: string }>().version;
    const before = await state();

    const intruder = { "fencing-resource": "orders/42-x", "content-type": contentType };
    for (const ask of [
      { method: "PUT", headers: writeHeaders(KEYS.admin, 0n, intruder), body: other },
      { method: "PUT", headers: writeHeaders(KEYS.admin, 0n, { ...intruder, "if-match": `"${version}"` }), body: other },
      { method: "DELETE", headers: writeHeaders(KEYS.admin, 0n, { "fencing-resource": "orders/42-x" }) },
    ]) {
      const refused = await c.send({ path, ...ask });
      expect(refused.status, `${ask.method} ${refused.text()}`).toBe(409);
      expect(refused.json()).toMatchObject({ type: "/problems/resource-mismatch", owner: "orders/42", resource: "orders/42-x" });
    }
    expect(await state()).toBe(before);
    const read = await c.send({ method: "GET", path, headers: writeHeaders(KEYS.admin, 0n) });
    expect(read.text()).toBe(body);
  });

  it("an equal token from another holder is refused like a stale one (409 stale-token); the holder itself writes again", async () => {
    const c = fixture.gw.client;
    const path = `/v1/${route}/held/${route}-key`;
    const as = (holder: string): Record<string, string> =>
      writeHeaders(KEYS.admin, 50n, { "fencing-resource": "held/r", "fencing-holder": holder, "content-type": contentType });
    expect((await c.send({ method: "PUT", path, headers: as("holder-1"), body })).status).toBe(200);
    const before = await state();
    const refused = await c.send({ method: "PUT", path, headers: as("holder-2"), body: other });
    expect(refused.status, refused.text()).toBe(409);
    expect(refused.json()).toMatchObject({ type: "/problems/stale-token", token: "50", highest: "50" });
    // A write without a holder at the same token is another lease too.
    const anonymous = await c.send({
      method: "PUT",
      path,
      headers: writeHeaders(KEYS.admin, 50n, { "fencing-resource": "held/r", "content-type": contentType }),
      body: other,
    });
    expect(anonymous.status).toBe(409);
    expect(await state()).toBe(before);
    expect((await c.send({ method: "PUT", path, headers: as("holder-1"), body: other })).status).toBe(200);
  });

  it("a key is well-formed Unicode: a lone surrogate is a 400 and writes nothing; 'a\uFFFD' is a key of its own", async () => {
    const c = fixture.gw.client;
    const own = await c.send({
      method: "PUT",
      path: `/v1/${route}/a%EF%BF%BD`,
      headers: writeHeaders(KEYS.admin, 7n, { "content-type": contentType }),
      body,
    });
    expect(own.status, own.text()).toBe(200);
    const before = await state();
    for (const lone of ["a%ED%A0%80", "a%ED%B0%80"]) {
      for (const ask of [
        { method: "PUT", headers: writeHeaders(KEYS.admin, 7n, { "content-type": contentType }), body: other },
        { method: "GET", headers: writeHeaders(KEYS.admin, 0n) },
        { method: "DELETE", headers: writeHeaders(KEYS.admin, 7n) },
      ]) {
        const refused = await c.send({ path: `/v1/${route}/${lone}`, ...ask });
        expect(refused.status, `${ask.method} ${lone}: ${refused.text()}`).toBe(400);
        expect(refused.json()).toMatchObject({ type: "/problems/invalid-request" });
      }
    }
    expect(await state()).toBe(before);
    const read = await c.send({ method: "GET", path: `/v1/${route}/a%EF%BF%BD`, headers: writeHeaders(KEYS.admin, 0n) });
    expect(read.status).toBe(200);
    expect(read.text()).toBe(body);
    expect((await c.send({ method: "GET", path: `/v1/${route}/a`, headers: writeHeaders(KEYS.admin, 0n) })).status).toBe(404);
  });

  it("a malformed holder id is a 400 and writes nothing", async () => {
    const before = await state();
    const bad = await fixture.gw.client.send({
      method: "PUT",
      path: `/v1/${route}/held/bad`,
      headers: writeHeaders(KEYS.admin, 1n, { "fencing-holder": "no spaces allowed", "content-type": contentType }),
      body,
    });
    expect(bad.status).toBe(400);
    expect(bad.json()).toMatchObject({ type: "/problems/invalid-request" });
    expect(await state()).toBe(before);
  });
});
