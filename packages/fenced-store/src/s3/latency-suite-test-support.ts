import type { S3Client } from "@aws-sdk/client-s3";
import { mulberry32 } from "@fenced/servers/random";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OutcomeUnknownError, StaleTokenError } from "../errors.js";
import type { Fence } from "../fence.js";
import { FencedS3 } from "./store.js";
import type { StartBackend } from "./backend-test-support.js";
import { aroundWire, type WireCall } from "./wire-test-support.js";

/** The suite, against the backend `start` gives (backend-test-support.ts). */
export function latencySuite(start: StartBackend): void {
  let server: Awaited<ReturnType<StartBackend>>;

  beforeAll(async () => {
    server = await start();
  });
  afterAll(async () => {
    await server?.stop();
  });

  const RESOURCE = "latency";
  const fence = (token: bigint): Fence => ({ resource: RESOURCE, token });

  interface Op {
    readonly kind: "put" | "register";
    readonly key: number;
    /** Too large to inline: the write uploads a data object, awaited before its manifest PUT. */
    readonly large: boolean;
  }

  const opArb: fc.Arbitrary<Op> = fc.record({
    kind: fc.constantFrom("put", "put", "put", "register"),
    key: fc.integer({ min: 0, max: 2 }),
    large: fc.boolean(),
  });

  /** One request as the HTTP handler was given it, numbered on one clock shared by every store. */
  interface WireEvent {
    /** Which of its store's operations sent it: a store runs one operation at a time. */
    readonly op: number;
    readonly method: string;
    readonly kind: "manifests" | "fences" | "data" | "other";
    /** A background deletion, which no write awaits. */
    readonly deletion: boolean;
    readonly sent: number;
    answered: number;
  }

  const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

  /**
   * Every request of `client` waits 0–15 ms (drawn from `next`) between the moment the HTTP handler is
   * given it and the moment it goes to the server. Each is recorded: sent when the handler is given it
   * (the earliest moment it may leave the process), answered when the answer is back.
   */
  function slowWire(client: S3Client, next: () => number, clock: { now: number }, op: () => number, events: WireEvent[]): void {
    aroundWire(client, async (call, send) => {
      const request = call as WireCall & { readonly query?: Record<string, unknown> };
      const kind = /\/(manifests|fences|data)\//.exec(request.path)?.[1];
      const event: WireEvent = {
        op: op(),
        method: request.method,
        kind: kind === "manifests" || kind === "fences" || kind === "data" ? kind : "other",
        deletion: request.method === "DELETE" || (request.method === "POST" && request.query !== undefined && "delete" in request.query),
        sent: clock.now++,
        answered: Infinity,
      };
      events.push(event);
      await sleep(Math.floor(next() * 16));
      try {
        return await send();
      } finally {
        event.answered = clock.now++;
      }
    });
  }

  /**
   * The rule of PROTOCOL.md ("S3" → "The write", step 6 and its invariant), as seen on the wire: each
   * manifest PUT is sent after the answer of a fence-object request F (a read, or a raise, whose answer
   * stands for a read of the one fence), and between F's answer and the PUT the write waited for
   * nothing it sent after F was answered: every request of the write answered in that gap was already
   * in flight when F was answered (the manifest read sent in parallel with F in steps 2 and 9, an upload
   * running while a fence is raised). Returns a description of each manifest PUT that breaks it.
   */
  function violations(events: readonly WireEvent[], store: number): string[] {
    const out: string[] = [];
    for (const put of events) {
      if (!(put.kind === "manifests" && put.method === "PUT")) continue;
      const earlier = events.filter((e) => e.op === put.op && e.sent < put.sent && !e.deletion);
      const waitedOnlyForWhatWasInFlight = (f: WireEvent): boolean =>
        earlier.every((x) => x === f || !(x.answered > f.answered && x.answered < put.sent) || x.sent < f.answered);
      const ok = earlier.some((f) => f.kind === "fences" && f.answered < put.sent && waitedOnlyForWhatWasInFlight(f));
      if (!ok) {
        const trace = earlier.map((e) => `${e.method} ${e.kind} [${e.sent}, ${e.answered}]`).join(", ");
        out.push(`store ${store} op ${put.op}: manifest PUT sent at ${put.sent} after ${trace}`);
      }
    }
    return out;
  }

  describe("FencedS3 under random latency on every request", () => {
    it("every manifest PUT follows a fence read sent after everything the write awaited, and the highest acknowledged token wins", async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.integer(),
          fc.array(fc.array(opArb, { minLength: 1, maxLength: 4 }), { minLength: 2, maxLength: 3 }),
          fc.integer({ min: 1, max: 3 }),
          async (seed, plans, keyCount) => {
            const bucket = await server.createBucket();
            const next = mulberry32(seed);
            const clock = { now: 0 };
            const acknowledged = new Map<string, bigint>();
            const logs: WireEvent[][] = [];
            const clients: S3Client[] = [];
            const runs = plans.map(async (plan, s) => {
              const client = server.client();
              clients.push(client);
              const events: WireEvent[] = [];
              logs[s] = events;
              let current = -1;
              slowWire(client, next, clock, () => current, events);
              const store = new FencedS3(client, { bucket });
              for (const [i, op] of plan.entries()) {
                current = i;
                // Increasing within each store, distinct across stores.
                const token = BigInt(i * plans.length + s + 1);
                const key = `k${op.key % keyCount}`;
                try {
                  if (op.kind === "register") await store.register(fence(token));
                  else {
                    const body = op.large ? `${token}:`.padEnd(70_000, "x") : `${token}`;
                    await store.put(key, body, { fence: fence(token) });
                    const before = acknowledged.get(key);
                    if (before === undefined || token > before) acknowledged.set(key, token);
                  }
                } catch (err) {
                  // radosgw answers the loser of a race with 500, which reads as a lost answer: while such an
                  // attempt is open the refusal comes as OutcomeUnknownError's cause. No answer is lost here,
                  // so it did not land (the final read checks it).
                  const refusal = err instanceof OutcomeUnknownError ? err.cause : err;
                  if (!(refusal instanceof StaleTokenError)) throw err;
                }
              }
              current = -1;
              await store.flush();
            });
            try {
              await Promise.all(runs);
              expect(logs.flatMap((events, s) => violations(events, s))).toEqual([]);
              const readerClient = server.client();
              clients.push(readerClient);
              const reader = new FencedS3(readerClient, { bucket });
              for (let k = 0; k < keyCount; k++) {
                const key = `k${k}`;
                const highest = acknowledged.get(key);
                const got = await reader.getBytes(key);
                if (highest === undefined) expect(got).toBeUndefined();
                else expect(got).toMatchObject({ resource: RESOURCE, token: highest });
              }
            } finally {
              for (const c of clients) c.destroy();
            }
          },
        ),
        { numRuns: 25 },
      );
    });
  });
}
