import type { S3Client } from "@aws-sdk/client-s3";
import { startS3, type StartedS3 } from "@fenced/servers";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ResourceMismatchError, StaleTokenError } from "../errors.js";
import { FencedS3 } from "./store.js";
import type { ManifestHeader } from "./manifest.js";
import { auditManifests, listKeys } from "./test-support.js";

let server: StartedS3;
let client: S3Client;
let bucket: string;
/** Every manifest the server accepted, whichever writer sent it: the history the invariants are checked on. */
let accepted: ManifestHeader[];

beforeAll(async () => {
  server = await startS3();
  client = server.client();
  accepted = auditManifests(client);
  bucket = await server.createBucket();
});
afterAll(async () => {
  await server?.stop();
});

interface Writer {
  readonly token: bigint;
  /** Which lease presented the token: equal tokens from different holders must not both be accepted. */
  readonly holder: "h1" | "h2" | undefined;
  /** The resource named by the fence: the key belongs to whichever resource created it. */
  readonly resource: "A" | "B";
  /** Milliseconds before the writer starts: together with real concurrency, the interleaving. */
  readonly delay: number;
  readonly op: "put" | "update" | "delete";
  /** Small bodies are inlined in the manifest; large ones go to a data object. */
  readonly large: boolean;
  /** Without the resource fence only the manifest's own ratchet stands between this writer and the key. */
  readonly checkResourceFence: boolean;
}

const writerArb: fc.Arbitrary<Writer> = fc.record({
  token: fc.bigInt({ min: 0n, max: 8n }),
  holder: fc.constantFrom(undefined, "h1", "h2"),
  resource: fc.constantFrom("A", "A", "A", "B"),
  delay: fc.integer({ min: 0, max: 15 }),
  op: fc.constantFrom("put", "put", "update", "delete"),
  large: fc.boolean(),
  checkResourceFence: fc.boolean(),
});

let run = 0;

describe("FencedS3 under random concurrent interleavings", () => {
  it("accepted tokens never decrease, an equal token comes from the same holder, only the owner writes, the final state is the last accepted write, a refused write changes nothing", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(writerArb, { minLength: 2, maxLength: 8 }), async (writers) => {
        // A fresh key and resource per run: the resource fence spans every key of its resource.
        const key = `prop/${++run}`;
        const manifestsBefore = accepted.length;
        const bodyOf = (i: number): string => (writers[i]?.large ? `writer ${i} `.repeat(8_000) : `writer ${i}`);
        const outcomes = await Promise.allSettled(
          writers.map(async (w, i) => {
            // Separate instances: nothing is shared between writers but the server, as with separate processes.
            const store = new FencedS3(client, { bucket, inlineLimit: 1024, checkResourceFence: w.checkResourceFence });
            await new Promise((r) => setTimeout(r, w.delay));
            const fence = { resource: `prop-${run}-${w.resource}`, token: w.token, holder: w.holder };
            const result =
              w.op === "put"
                ? await store.put(key, bodyOf(i), { fence })
                : w.op === "delete"
                  ? await store.delete(key, { fence })
                  : await store.update(key, () => bodyOf(i), { fence });
            await store.flush();
            return result;
          }),
        );

        const history = accepted.slice(manifestsBefore).filter((h) => h.key === key);
        history.sort((a, b) => a.seq - b.seq);
        // The manifest CAS admits one successor per version: seq is 1..n without gap or repeat.
        expect(history.map((h) => h.seq)).toEqual(history.map((_, i) => i + 1));
        // Ownership: every accepted write names the resource that created the key.
        const owner = history[0]?.owner;
        for (const h of history) expect(h.owner).toBe(owner);
        // The ratchet: accepted tokens never decrease, and an equal token is the same holder's.
        for (let i = 1; i < history.length; i++) {
          const [before, after] = [history[i - 1], history[i]];
          expect(BigInt(after?.token ?? -1)).toBeGreaterThanOrEqual(BigInt(before?.token ?? -1));
          if (after?.token === before?.token) expect(after?.holder).toBe(before?.holder);
        }
        const resourceOf = (w: Writer | undefined): string => `prop-${run}-${w?.resource}`;

        const acknowledged = new Map<string, number>();
        for (const [i, o] of outcomes.entries()) {
          if (o.status === "fulfilled") {
            acknowledged.set(o.value.version, i);
            expect(o.value.token).toBe(writers[i]?.token);
            expect(resourceOf(writers[i])).toBe(owner);
          } else if (o.reason instanceof ResourceMismatchError) {
            // Refused for naming a resource other than the key's owner.
            expect(o.reason.owner).toBe(owner);
            expect(o.reason.resource).toBe(resourceOf(writers[i]));
            expect(o.reason.resource).not.toBe(owner);
          } else {
            // Refused for a stale token (or an equal one from another holder), and only in favour of a
            // token and holder some writer of the resource really presented (the resource fence may hold
            // one whose own data write then lost to a higher one).
            expect(o.reason).toBeInstanceOf(StaleTokenError);
            const err = o.reason as StaleTokenError;
            const holder = writers[i]?.holder ?? null;
            expect(err.highest > err.token || (err.highest === err.token && err.highestHolder !== holder)).toBe(true);
            expect(writers.some((w) => resourceOf(w) === err.resource && w.token === err.highest && (w.holder ?? null) === err.highestHolder)).toBe(true);
          }
        }
        // Exactly the acknowledged writes are in the history: a refused write left no manifest behind.
        expect(history.map((h) => h.writeId).sort()).toEqual([...acknowledged.keys()].sort());

        // The final state is the last accepted write.
        const last = history.at(-1);
        const reader = new FencedS3(client, { bucket });
        const final = await reader.getBytes(key);
        if (last === undefined || last.body.kind === "tombstone") {
          expect(final).toBeUndefined();
        } else {
          const writer = acknowledged.get(last.writeId) ?? -1;
          expect(final?.version).toBe(last.writeId);
          expect(final?.body.toString()).toBe(bodyOf(writer));
        }
        // No data object survives but the current one: superseded and refused bodies are gone.
        const data = await listKeys(client, bucket, `fenced/data/${key}/`);
        expect(data).toEqual(last?.body.kind === "object" ? [last.body.dataKey] : []);
      }),
      { numRuns: 40, endOnFailure: true },
    );
  });
});
