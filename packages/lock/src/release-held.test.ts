import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Redlock } from "./redlock.js";
import { drained, leaseValuesOn, startTestNodes, type TestNodes } from "./test-support.js";

/**
 * redlock.release(held) deletes the lease key with the clients of the Redlock it is called on,
 * every time it is called, whoever issued `held`; a Lease handed to it is also marked released (its
 * signal aborts with `released`). Neither the Lease's own Redlock (whose clients may be closed) nor
 * an earlier release() of the Lease (which may have reached no node) stands in for it.
 */
describe("redlock.release(lease) releases with its own clients", () => {
  let t: TestNodes;
  beforeAll(async () => {
    t = await startTestNodes(3);
  });
  afterAll(async () => {
    await t?.stop();
  });

  it("B.release(leaseFromA), A's clients closed: the lease key must be gone from every node", async () => {
    const aClients = await t.moreClients();
    const a = new Redlock(aClients, { retryCount: 0 });
    const b = new Redlock(t.clients, { retryCount: 0 });
    const resource = "release-held/release-through-b";
    const lease = await a.acquire(resource, 30_000);
    for (const c of aClients) c.disconnect(); // A is shut down (its process part restarted its clients)
    await b.release(lease); // resolves
    await drained(t.clients);
    const left = await leaseValuesOn(t.admin, resource);
    expect(left).toEqual([null, null, null]);
    expect(lease.signal.aborted).toBe(true);
    expect(lease.lostReason?.kind).toBe("released");
  });

  it("B.release({ resource, token, value }) with A's clients closed releases", async () => {
    const aClients = await t.moreClients();
    const a = new Redlock(aClients, { retryCount: 0 });
    const b = new Redlock(t.clients, { retryCount: 0 });
    const resource = "release-held/release-plain-through-b";
    const lease = await a.acquire(resource, 30_000);
    for (const c of aClients) c.disconnect();
    await b.release({ resource: lease.resource, token: lease.token, value: lease.value });
    await drained(t.clients);
    expect(await leaseValuesOn(t.admin, resource)).toEqual([null, null, null]);
  });

  it("a redlock.release(lease) retried after a release that reached no node deletes the key", async () => {
    const aClients = await t.moreClients();
    const a = new Redlock(aClients, { retryCount: 0 });
    const resource = "release-held/release-retry";
    const lease = await a.acquire(resource, 30_000);
    // The first release while A's connections are down (a network blip): it resolves, nothing deleted.
    for (const c of aClients) c.disconnect();
    await lease.release();
    const b = new Redlock(t.clients, { retryCount: 0 });
    await b.release(lease); // the caller retries the release with working connections
    await drained(t.clients);
    expect(await leaseValuesOn(t.admin, resource)).toEqual([null, null, null]);
  });
});
