import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { admits } from "@fenced/fence";
import type { FencedStore, StoredVersion } from "../contract.js";
import { OutcomeUnknownError, ResourceMismatchError, StaleTokenError } from "../errors.js";
import { entryFor, type ManifestHeader } from "./manifest.js";

/**
 * A store of the object algorithm under random concurrent interleavings on its real backend
 * (dynamodb/property.test.ts on dynalite, azure-blob/property.test.ts on azurite; S3's own, with
 * its data objects, is s3/property-suite-test-support.ts): writers of one key (put, delete,
 * register, transfer), each a store of its own, started at random delays. Every manifest the
 * backend accepted is the history the invariants are checked on: its writes form one chain (seq 1,
 * 2, 3, … without gap or repeat: the conditional write admits one successor per version), each
 * resource's entry never goes down, an equal token is the same holder's, only acknowledged writes
 * are in it, and the key reads as its last.
 */

interface Writer {
  readonly token: bigint;
  readonly holder: "h1" | "h2" | undefined;
  readonly resource: "A" | "B";
  readonly delay: number;
  readonly op: "put" | "delete" | "register" | "transfer";
  readonly checkResourceFence: boolean;
  readonly toToken: bigint;
}

const fields = {
  token: fc.bigInt({ min: 0n, max: 8n }),
  holder: fc.constantFrom(undefined, "h1" as const, "h2" as const),
  resource: fc.constantFrom("A" as const, "A" as const, "A" as const, "B" as const),
  delay: fc.integer({ min: 0, max: 10 }),
  op: fc.constantFrom("put" as const, "put" as const, "delete" as const, "register" as const),
  checkResourceFence: fc.boolean(),
  toToken: fc.bigInt({ min: 0n, max: 8n }),
};
const writerArb: fc.Arbitrary<Writer> = fc.oneof(
  { arbitrary: fc.record(fields), weight: 4 },
  { arbitrary: fc.record({ ...fields, op: fc.constant("transfer" as const), token: fc.bigInt({ min: 5n, max: 8n }) }), weight: 1 },
);

/**
 * The property, for a store of the object algorithm (../cas/): `open` makes a store of its own for
 * each writer, `value` a value of the store's kind, `accepted` is every manifest the backend
 * accepted (the caller audits its own backend's writes).
 */
export function writersProperty<V>(
  title: string,
  open: (options: { readonly checkResourceFence: boolean }) => FencedStore<V, StoredVersion>,
  value: (writer: number) => V,
  accepted: readonly ManifestHeader[],
): void {
  describe(title, () => {
    it("accepted writes form one chain, each resource's tokens never decrease, an equal token is the same holder's, a refused write leaves nothing, the key reads as its last write", async () => {
      let run = 0;
      await fc.assert(
        fc.asyncProperty(fc.array(writerArb, { minLength: 2, maxLength: 8 }), async (writers) => {
          const key = `prop/${++run}`;
          const resourceOf = (w: Writer | undefined, other = false): string => `prop-${run}-${(w?.resource === "A") !== other ? "A" : "B"}`;
          const from = accepted.length;
          const outcomes = await Promise.allSettled(
            writers.map(async (w, i) => {
              const store = open({ checkResourceFence: w.checkResourceFence });
              await new Promise((r) => setTimeout(r, w.delay));
              const fence = { resource: resourceOf(w), token: w.token, holder: w.holder };
              if (w.op === "put") return store.put(key, value(i), { fence });
              if (w.op === "delete") return store.delete(key, { fence });
              if (w.op === "register") return store.register(fence);
              return store.transfer(key, { from: fence, to: { resource: resourceOf(w, true), token: w.toToken } });
            }),
          );
          const history = accepted
            .slice(from)
            .filter((h) => h.key === key)
            .sort((a, b) => a.seq - b.seq);
          expect(history.map((h) => h.seq)).toEqual(history.map((_, i) => i + 1));
          for (let i = 1; i < history.length; i++) {
            for (const resource of [resourceOf(undefined), resourceOf(undefined, true)]) {
              const [was, now] = [entryFor(history[i - 1], resource), entryFor(history[i], resource)];
              if (was !== undefined)
                expect(now !== undefined && admits(was, { resource, token: now.token, holder: now.holder })).toBe(true);
            }
          }
          const acknowledged: string[] = [];
          for (const o of outcomes) {
            if (o.status === "fulfilled") {
              if (o.value !== undefined) acknowledged.push(o.value.version);
              continue;
            }
            const reason: unknown = o.reason instanceof OutcomeUnknownError ? o.reason.cause : o.reason;
            expect(reason instanceof StaleTokenError || reason instanceof ResourceMismatchError, String(reason)).toBe(true);
          }
          // Exactly the acknowledged writes are in the history: a refused write left no manifest behind.
          expect(history.map((h) => h.writeId).sort()).toEqual(acknowledged.sort());
          const last = history.at(-1);
          const read = await open({ checkResourceFence: true }).get(key);
          if (last === undefined || last.body.kind === "tombstone") expect(read).toBeUndefined();
          else expect(read?.version).toBe(last.writeId);
        }),
        { numRuns: 40, endOnFailure: true },
      );
    });
  });
}
