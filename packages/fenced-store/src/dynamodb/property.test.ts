import fc from "fast-check";
import type { DynamoDBClient } from "@aws-sdk/client-dynamodb";
import { startDynamo, type StartedDynamo } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { admits } from "@fenced/fence";
import { OutcomeUnknownError, ResourceMismatchError, StaleTokenError } from "../errors.js";
import { decodeManifest, entryFor, type ManifestHeader } from "../cas/manifest.js";
import { FencedDynamo } from "./store.js";

/**
 * FencedDynamo under random concurrent interleavings on dynalite, as s3/property.test.ts holds the
 * S3 store on radosgw: writers of one key (put, delete, register, transfer), each a store of its own,
 * started at random delays. Every manifest item dynalite accepted is the history the invariants are
 * checked on: its writes form one chain (seq 1, 2, 3, … without gap or repeat: the condition on the
 * item's etag admits one successor per version), each resource's entry never goes down, an equal
 * token is the same holder's, only acknowledged writes are in it, and the key reads as its last.
 */
let dynamo: StartedDynamo;
let client: DynamoDBClient;
let table: string;
/** Every manifest item a conditional PutItem wrote, as the client saw the write succeed. */
const accepted: ManifestHeader[] = [];

beforeAll(async () => {
  dynamo = await startDynamo();
  client = dynamo.client();
  client.middlewareStack.add(
    (next) => async (args) => {
      const out = await next(args);
      const input = args.input as { Item?: { key?: { S?: string }; body?: { B?: Uint8Array } }; ConditionExpression?: string };
      const name = input.Item?.key?.S ?? "";
      if (input.ConditionExpression !== undefined && input.Item?.body?.B !== undefined && name.includes("/manifests/")) {
        accepted.push(decodeManifest(name.replace(/^.*?\/manifests\//, ""), Buffer.from(input.Item.body.B), "dynamodb").header);
      }
      return out;
    },
    { step: "initialize", name: "auditManifests" },
  );
  table = await dynamo.createTable();
}, 60_000);
afterAll(() => dynamo?.stop());

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

describe("FencedDynamo under random concurrent interleavings", () => {
  it("accepted writes form one chain, each resource's tokens never decrease, an equal token is the same holder's, a refused write leaves nothing, the key reads as its last write", async () => {
    let run = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(writerArb, { minLength: 2, maxLength: 8 }), async (writers) => {
        const key = `prop/${++run}`;
        const resourceOf = (w: Writer | undefined, other = false): string => `prop-${run}-${(w?.resource === "A") !== other ? "A" : "B"}`;
        const from = accepted.length;
        const outcomes = await Promise.allSettled(
          writers.map(async (w, i) => {
            const store = new FencedDynamo(client, { table, checkResourceFence: w.checkResourceFence });
            await new Promise((r) => setTimeout(r, w.delay));
            const fence = { resource: resourceOf(w), token: w.token, holder: w.holder };
            if (w.op === "put") return store.put(key, { writer: i }, { fence });
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
            if (was !== undefined) expect(now !== undefined && admits(was, { resource, token: now.token, holder: now.holder })).toBe(true);
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
        const read = await new FencedDynamo(client, { table }).get(key);
        if (last === undefined || last.body.kind === "tombstone") expect(read).toBeUndefined();
        else expect(read?.version).toBe(last.writeId);
      }),
      { numRuns: 40, endOnFailure: true },
    );
  });
});
