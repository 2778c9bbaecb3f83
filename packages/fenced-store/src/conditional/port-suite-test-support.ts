import { randomBytes } from "node:crypto";
import { expect, it } from "vitest";
import type { ConditionalPort, WriteOutcome } from "./port.js";

/**
 * The port's contract (port.ts, INVARIANT), one case per promise, run against each adapter on its
 * real server: s3/store.test.ts (radosgw), dynamodb/items.test.ts (dynalite), azure-blob/blobs.test.ts
 * (azurite). `port()` answers the adapter under test, opened on a fresh bucket, table or container.
 */
export function portSuite(port: () => ConditionalPort): void {
  const name = (): string => `port/${randomBytes(8).toString("hex")}`;
  const bytes = (text: string): Buffer => Buffer.from(`${text}:${randomBytes(8).toString("hex")}`);
  const landed = (outcome: WriteOutcome): string => {
    if (!outcome.ok) throw outcome.error;
    return outcome.etag;
  };
  /** A refusal by the condition: "precondition", or "conflict" where the backend answers a lost race so. */
  const refused = (outcome: WriteOutcome): void => {
    expect(outcome.ok ? "landed" : outcome.failure).toMatch(/^(precondition|conflict)$/);
  };

  it("creates a record only where it is absent (ifNoneMatch); a refused create changes nothing", async () => {
    const p = port();
    const key = name();
    const first = bytes("first");
    const etag = landed(await p.write(key, first, { ifNoneMatch: true }));
    expect(await p.read(key)).toEqual({ etag, body: first });
    refused(await p.write(key, bytes("second"), { ifNoneMatch: true }));
    expect(await p.read(key)).toEqual({ etag, body: first });
  });

  it("replaces a record only at the ETag given (ifMatch), with a new ETag; a stale one, or a missing record, is refused and changes nothing", async () => {
    const p = port();
    const key = name();
    const created = landed(await p.write(key, bytes("v1"), { ifNoneMatch: true }));
    const v2 = bytes("v2");
    const swapped = landed(await p.write(key, v2, { ifMatch: created }));
    expect(swapped).not.toBe(created);
    expect(await p.read(key)).toEqual({ etag: swapped, body: v2 });
    refused(await p.write(key, bytes("v3"), { ifMatch: created }));
    expect(await p.read(key)).toEqual({ etag: swapped, body: v2 });
    const missing = name();
    refused(await p.write(missing, bytes("v1"), { ifMatch: created }));
    expect(await p.read(missing)).toBeUndefined();
  });

  it("answers a revalidation: unchanged at the current ETag, the record as it is now at a replaced one, absent once removed", async () => {
    const p = port();
    const key = name();
    const created = landed(await p.write(key, bytes("v1"), { ifNoneMatch: true }));
    const v2 = bytes("v2");
    const swapped = landed(await p.write(key, v2, { ifMatch: created }));
    const current = await p.readIfChanged(key, swapped);
    // A backend may answer the unchanged record with its bytes; never with other ones.
    expect(current.unchanged || current.object?.etag === swapped).toBe(true);
    if (p.capabilities.notModified) expect(current).toEqual({ unchanged: true });
    expect(await p.readIfChanged(key, created)).toEqual({ unchanged: false, object: { etag: swapped, body: v2 } });
    await p.remove(key);
    expect(await p.read(key)).toBeUndefined();
    expect(await p.readIfChanged(key, swapped)).toEqual({ unchanged: false, object: undefined });
  });

  it("gives two concurrent swaps of one ETag one winner; the loser is refused (or its answer was lost, never a second landing)", async () => {
    const p = port();
    const key = name();
    const created = landed(await p.write(key, bytes("v1"), { ifNoneMatch: true }));
    const bodies = Array.from({ length: 8 }, (_, i) => bytes(`racer-${i}`));
    const outcomes = await Promise.all(bodies.map((body) => p.write(key, body, { ifMatch: created })));
    const winners = outcomes.flatMap((o, i) => (o.ok ? [i] : []));
    expect(winners).toHaveLength(1);
    for (const o of outcomes) if (!o.ok) expect(o.failure).toMatch(/^(precondition|conflict|ambiguous)$/);
    const now = await p.read(key);
    expect(now?.body).toEqual(bodies[winners[0] as number]);
  });

  it("takes a record of capabilities.maxRecordBytes", async () => {
    const p = port();
    // Capped at 512 KiB: S3 takes 5 GiB in one PUT (Azure 5000 MiB), more than a test should send.
    const size = Math.min(p.capabilities.maxRecordBytes, 512 * 1024);
    const key = name();
    const body = randomBytes(size);
    const etag = landed(await p.write(key, body, { ifNoneMatch: true }));
    expect(await p.read(key)).toEqual({ etag, body });
    await p.remove(key);
  });
}
