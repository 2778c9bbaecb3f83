import { Readable } from "node:stream";
import { CreateMultipartUploadCommand, PutObjectCommand } from "@aws-sdk/client-s3";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  ContentionError,
  OutcomeUnknownError,
  ResourceMismatchError,
  StaleTokenError,
  StoreUnavailableError,
  VersionMismatchError,
} from "../errors.js";
import { decodeFence, decodeManifest, type ManifestHeader } from "../cas/manifest.js";
import {
  awsProfile,
  MemoryS3,
  memoryS3Client,
  radosgwProfile,
  type MemoryCall,
  SeededScheduler,
  tick,
  type QuirkProfile,
  type Scheduler,
} from "./memory-s3-test-support.js";
import { FencedS3 } from "./store.js";

/**
 * FencedS3's write path over the in-memory S3 server: no server process, every interleaving of
 * requests chosen by a seeded scheduler, answers delayed and lost after their request was applied.
 * The server's log of applied requests is the history the invariants are checked on.
 */

const PREFIX = "p/";
const fence = (token: number, resource = "R") => ({ resource, token: BigInt(token) });

function memoryStore(memory: MemoryS3, label = "client", inlineLimit = 256): { store: FencedS3; bucket: string } {
  const bucket = memory.createBucket(`bucket-${label}`);
  return { bucket, store: new FencedS3(memory.client(label), { bucket, prefix: PREFIX, inlineLimit }) };
}

const text = async (store: FencedS3, key: string) => (await store.getBytes(key))?.body.toString("utf8");

/** Every manifest of `key` the server applied, in the order it did, with the client that sent it. */
function manifests(memory: MemoryS3, key: string): { client: string; header: ManifestHeader }[] {
  return memory.log.flatMap((a) => {
    if (a.call.operation !== "PutObject" || a.call.key !== `${PREFIX}manifests/${key}` || a.wrote === undefined) return [];
    return [{ client: a.call.client, header: decodeManifest(key, a.wrote.body).header }];
  });
}

describe("FencedS3 over the in-memory S3 server", () => {
  it("put, get, versions, a stale token, a version mismatch and another resource's key, inline and in a data object", async () => {
    for (const inlineLimit of [256, 0]) {
      const { store } = memoryStore(new MemoryS3(radosgwProfile), "one", inlineLimit);
      const first = await store.put("k", "from 5", { fence: fence(5) });
      expect(first.token).toBe(5n);
      expect(await store.getBytes("k")).toMatchObject({ version: first.version, token: 5n, resource: "R" });
      expect(await text(store, "k")).toBe("from 5");
      const second = await store.put("k", "from 6", { fence: fence(6), ifVersion: first.version });
      expect(second.version).not.toBe(first.version);

      await expect(store.put("k", "from 4", { fence: fence(4) })).rejects.toBeInstanceOf(StaleTokenError);
      await expect(store.put("k", "again", { fence: fence(6), ifVersion: first.version })).rejects.toBeInstanceOf(VersionMismatchError);
      await expect(store.put("k", "other", { fence: fence(9, "S") })).rejects.toBeInstanceOf(ResourceMismatchError);
      expect(await store.getBytes("k")).toMatchObject({ version: second.version, token: 6n });
      expect(await text(store, "k")).toBe("from 6");

      await store.delete("k", { fence: fence(6) });
      expect(await store.getBytes("k")).toBeUndefined();
      await store.flush();
    }
  });

  it("a stream of unknown length over a part goes multipart; verify() passes on both profiles", async () => {
    const memory = new MemoryS3(radosgwProfile);
    const { store, bucket } = memoryStore(memory);
    const body = Buffer.alloc(9 * 1024 * 1024, "x");
    await store.put("big", Readable.from([body.subarray(0, 5_000_000), body.subarray(5_000_000)]), { fence: fence(1) });
    expect((await store.getBytes("big"))?.body.equals(body)).toBe(true);
    await store.flush();
    expect(memory.log.filter((a) => a.call.operation === "CompleteMultipartUpload" && a.status === 200)).toHaveLength(1);
    expect(memory.keys(bucket, `${PREFIX}data/`)).toHaveLength(1);
    for (const profile of [radosgwProfile, awsProfile])
      expect(await new FencedS3(memoryS3Client({ profile }), { bucket: "bucket" }).verify()).toEqual({ etagForm: "bare" });
  });

  it("sweep() lists, judges and deletes orphans page by page, and aborts their uploads: ListObjectsV2, ListMultipartUploads, DeleteObjects", async () => {
    const memory = new MemoryS3(radosgwProfile);
    const { store, bucket } = memoryStore(memory, "one", 0);
    await store.put("k", "current", { fence: fence(1) });
    await store.flush();
    const [live] = memory.keys(bucket, `${PREFIX}data/`);
    // Creates that lost to the manifest now there: nothing can come to name them.
    const orphans = ["1", "2", "3"].map((n) => `${PREFIX}data/k/absent.${n.repeat(32)}`);
    const client = memory.client("dead writer");
    for (const Key of orphans) await client.send(new PutObjectCommand({ Bucket: bucket, Key, Body: "orphan", IfNoneMatch: "*" }));
    await client.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: `${PREFIX}data/k/absent.${"4".repeat(32)}` }));
    const report = await store.sweep({ minAgeMs: 0, pageSize: 2 });
    expect([report.deleted.objects, report.uploads.aborted]).toEqual([3, 1]);
    expect(memory.keys(bucket, `${PREFIX}data/`)).toEqual([live]);
    // Four data objects in pages of two, then the probes' folder.
    expect(memory.log.filter((a) => a.call.operation === "ListObjectsV2")).toHaveLength(3);
    expect(await text(store, "k")).toBe("current");
  });

  it("a manifest PUT applied whose answer is lost, and a race lost with radosgw's 500: the write reads back and resolves with the current version", async () => {
    let lose = true;
    const scheduler: Scheduler = {
      turn: () => Promise.resolve(),
      deliver: (call) => {
        const manifest = call.operation === "PutObject" && (call.key?.includes("/manifests/") ?? false);
        const deliver = !(lose && manifest);
        if (manifest) lose = false;
        return Promise.resolve(deliver);
      },
    };
    const memory = new MemoryS3(radosgwProfile, scheduler);
    const { store } = memoryStore(memory);
    const written = await store.put("k", "body", { fence: fence(1) });
    expect(memory.log.filter((a) => a.lost)).toHaveLength(1);
    expect(await store.getBytes("k")).toMatchObject({ version: written.version });

    // Two manifest PUTs against the same version, both arrived before either is applied: the one applied
    // second lost a true race, and radosgw may answer it 500.
    const held: (() => void)[] = [];
    let armed = false;
    const racing: Scheduler = {
      turn: (call) =>
        new Promise((go) => {
          const manifest = call.operation === "PutObject" && (call.key?.includes("/manifests/") ?? false);
          if (!armed || !manifest || held.length === 2) return go();
          held.push(go);
          if (held.length === 2) for (const release of held) release();
        }),
      choose: () => radosgwProfile.raceLoser.findIndex((answer) => answer.status === 500),
    };
    const raced = new MemoryS3(radosgwProfile, racing);
    const bucket = raced.createBucket();
    const writers = [2, 3].map((token) => ({
      token,
      store: new FencedS3(raced.client(`writer-${token}`), { bucket, prefix: PREFIX, checkResourceFence: false }),
    }));
    await writers[0]?.store.put("k", "first", { fence: fence(1) });
    // The other store reads it too: a store that never saw the key sends a create, which does not race an If-Match.
    await writers[1]?.store.getBytes("k");
    armed = true;
    const results = await Promise.allSettled(writers.map((w) => w.store.put("k", `from ${w.token}`, { fence: fence(w.token) })));
    const losers = raced.log.filter((a) => a.status === 500).map((a) => a.call.client);
    expect(losers).toHaveLength(1);
    // The loser read back, never left unknown: under the winner's 3 it is refused; over the winner's 2 it writes next.
    const names = results.map((r) => (r.status === "fulfilled" ? "ok" : (r.reason as Error).name));
    expect(names).toEqual(losers[0] === "writer-2" ? ["StaleTokenError", "ok"] : ["ok", "ok"]);
    expect((await writers[0]?.store.getBytes("k"))?.token).toBe(3n);
  });
});

describe("a lost answer to CompleteMultipartUpload (the SDK sends it again)", () => {
  /** put() of a stream of unknown length over one part, the first answer to CompleteMultipartUpload lost. */
  async function putLosingComplete(profile: QuirkProfile): Promise<{ outcome: unknown; memory: MemoryS3 }> {
    let lost = false;
    const memory = new MemoryS3(profile, {
      turn: () => Promise.resolve(),
      deliver: (call) => Promise.resolve(call.operation !== "CompleteMultipartUpload" || lost || !(lost = true)),
    });
    const bucket = memory.createBucket();
    const store = new FencedS3(memory.client(), { bucket, prefix: PREFIX, partSize: 5 * 1024 * 1024 });
    const body = Readable.from([Buffer.alloc(6 * 1024 * 1024, "x")]);
    const outcome = await store.put("k", body, { fence: fence(1) }).then(
      (result) => result,
      (error: unknown) => error,
    );
    await store.flush();
    expect(memory.log.filter((a) => a.call.operation === "CompleteMultipartUpload").map((a) => a.lost)).toEqual([true, false]);
    return { outcome, memory };
  }

  it("radosgw answers the retry as the first time: the write goes on and lands", async () => {
    const { outcome } = await putLosingComplete(radosgwProfile);
    expect(outcome).toMatchObject({ token: 1n });
  });

  // Before multipart.ts looked for its own key on NoSuchUpload, put() rejected with the SDK's raw
  // NoSuchUpload error here, although the upload had completed, and its data object was deleted.
  it("a backend that answers the retry NoSuchUpload: the upload's own key exists, so the write goes on and lands", async () => {
    const { outcome, memory } = await putLosingComplete(awsProfile);
    expect(outcome).toMatchObject({ token: 1n });
    expect(memory.log.filter((a) => a.call.operation === "HeadObject").map((a) => a.status)).toEqual([200]);
  });
});

describe("a caller's abort, as the SDK's Node handler honours it", () => {
  const isManifestPut = (call: MemoryCall) => call.operation === "PutObject" && (call.key?.includes("/manifests/") ?? false);

  it("while the manifest PUT waits to be applied: the call rejects with the reason and the PUT never lands, even once its turn comes", async () => {
    let arrived!: () => void;
    const reached = new Promise<void>((resolve) => (arrived = resolve));
    let release!: () => void;
    const turnCame = new Promise<void>((resolve) => (release = resolve));
    const memory = new MemoryS3(radosgwProfile, {
      turn: (call) => (isManifestPut(call) ? (arrived(), turnCame) : Promise.resolve()),
    });
    const { store } = memoryStore(memory);
    const caller = new AbortController();
    const put = store.put("k", "body", { fence: fence(1), signal: caller.signal });
    await reached;
    caller.abort(new Error("the caller gave up"));
    await expect(put).rejects.toThrow("the caller gave up");
    release();
    await tick();
    expect(memory.log.filter((a) => isManifestPut(a.call))).toEqual([]);
  });

  it("after the manifest PUT was applied, before its answer: the call rejects with the reason, and the write is there", async () => {
    let applied!: () => void;
    const reached = new Promise<void>((resolve) => (applied = resolve));
    const memory = new MemoryS3(radosgwProfile, {
      turn: () => Promise.resolve(),
      deliver: (call) => (isManifestPut(call) ? (applied(), new Promise<boolean>(() => undefined)) : Promise.resolve(true)),
    });
    const { store } = memoryStore(memory);
    const caller = new AbortController();
    const put = store.put("k", "body", { fence: fence(1), signal: caller.signal });
    await reached;
    caller.abort(new Error("the caller gave up"));
    await expect(put).rejects.toThrow("the caller gave up");
    expect(memory.log.filter((a) => isManifestPut(a.call)).map((a) => a.lost)).toEqual([true]);
    expect(await text(store, "k")).toBe("body");
  });
});

type Op = { readonly kind: "put" | "update" | "delete"; readonly key: "k1" | "k2"; readonly large: boolean };

const opArb: fc.Arbitrary<Op> = fc.record({
  kind: fc.constantFrom("put" as const, "put" as const, "update" as const, "delete" as const),
  key: fc.constantFrom("k1" as const, "k2" as const),
  large: fc.boolean(),
});

const TYPED = [StaleTokenError, VersionMismatchError, ResourceMismatchError, ContentionError, OutcomeUnknownError, StoreUnavailableError];

interface Outcome {
  /** The client the call's store sent its requests through (one per call). */
  readonly label: string;
  readonly op: Op;
  readonly token: number;
  /** Where the call's requests begin in the server's log. */
  readonly from: number;
  readonly started: number;
  readonly ended: number;
  readonly result: { ok: true; version: string } | { ok: false; error: unknown };
}

/** The manifests a call landed. */
function mine(memory: MemoryS3, o: Outcome): { client: string; header: ManifestHeader }[] {
  return manifests(memory, o.op.key).filter((m) => m.client === o.label);
}

describe("FencedS3 under seeded schedules of two or three writers", () => {
  it("tokens never go down on a key, nothing lower lands after a higher write was acknowledged, every call resolves with a version that was the manifest's or rejects typed, and a refused call wrote nothing", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer(),
        fc.array(fc.array(opArb, { minLength: 1, maxLength: 2 }), { minLength: 2, maxLength: 3 }),
        fc.constantFrom(0, 0.1, 0.3),
        // Without the resource's fence object, the manifest's compare-and-swap alone keeps each key's ratchet.
        fc.boolean(),
        fc.constantFrom(radosgwProfile, awsProfile),
        async (seed, writers, loss, checkResourceFence, profile) => {
          const scheduler = new SeededScheduler(seed, loss);
          const memory = new MemoryS3(profile, scheduler);
          const bucket = memory.createBucket();
          const outcomes: Outcome[] = [];
          let clock = 0;
          // Distinct tokens, 1 to 3 rotated by the seed: which writer holds the highest varies.
          const tokens = writers.map((_, i) => ((i + (seed >>> 0)) % writers.length) + 1);
          await Promise.all(
            writers.map(async (ops, w) => {
              const token = tokens[w] ?? 0;
              for (const [j, op] of ops.entries()) {
                // A store and client per call: whatever the server applied from this label, this call sent.
                const label = `writer-${w}-call-${j}`;
                const store = new FencedS3(memory.client(label), { bucket, prefix: PREFIX, inlineLimit: 64, checkResourceFence });
                const body = `${label} ${op.kind}`.repeat(op.large ? 10 : 1);
                const [from, started] = [memory.log.length, ++clock];
                const call =
                  op.kind === "put"
                    ? store.put(op.key, body, { fence: fence(token) })
                    : op.kind === "delete"
                      ? store.delete(op.key, { fence: fence(token) })
                      : store.update(op.key, () => body, { fence: fence(token) });
                const result = await call.then(
                  (r) => ({ ok: true as const, version: r.version }),
                  (error: unknown) => ({ ok: false as const, error }),
                );
                outcomes.push({ label, op, token, from, started, ended: ++clock, result });
                await store.flush();
              }
            }),
          );

          scheduler.loss = 0; // the checks' own reads get their answers
          // The resource's fence object, raised by every write, never goes down either.
          const raised = memory.log.flatMap((a) =>
            a.call.operation === "PutObject" && a.call.key?.startsWith(`${PREFIX}fences/`) === true && a.wrote !== undefined
              ? [decodeFence("R", a.wrote.body).token]
              : [],
          );
          for (let i = 1; i < raised.length; i++) expect(raised[i]).toBeGreaterThanOrEqual(raised[i - 1] ?? 0n);

          // Cleanup is best effort (a writer whose reads all lost their answers leaves its orphans): a sweep
          // deletes what it left, and nothing a manifest names.
          const reader = new FencedS3(memory.client("reader"), { bucket, prefix: PREFIX });
          await reader.sweep({ minAgeMs: 0 });
          for (const key of ["k1", "k2"] as const) {
            const history = manifests(memory, key);
            // One successor per version (the compare-and-swap), and the token never goes down.
            expect(history.map((m) => m.header.seq)).toEqual(history.map((_, i) => i + 1));
            for (let i = 1; i < history.length; i++)
              expect(BigInt(history[i]?.header.token ?? -1)).toBeGreaterThanOrEqual(BigInt(history[i - 1]?.header.token ?? 0));
            // The key reads as its last manifest, its body still there, and no other data object of it survives.
            const last = history.at(-1)?.header;
            expect((await reader.getBytes(key))?.version).toBe(last?.body.kind === "tombstone" ? undefined : last?.writeId);
            expect(memory.keys(bucket, `${PREFIX}data/${key}/`)).toEqual(last?.body.kind === "object" ? [last.body.dataKey] : []);
          }

          for (const o of outcomes) {
            const landedByCall = mine(memory, o);
            // Everything the call sent, answered before it ended or applied after (a request it gave up on).
            const sent = memory.log.filter((a) => a.call.client === o.label);
            if (o.result.ok) {
              // Resolved: the version is a manifest this writer's call put, with its token.
              const landed = landedByCall.find((m) => m.header.writeId === (o.result.ok ? o.result.version : ""));
              expect(landed?.header.token, `${o.label} ${o.op.kind} ${o.op.key}`).toBe(String(o.token));
            } else {
              const { error } = o.result;
              expect(
                TYPED.some((type) => error instanceof type),
                String(error),
              ).toBe(true);
              if (error instanceof OutcomeUnknownError) {
                // Unknown only when an answer left it so: lost, or a 5xx (radosgw's race loser).
                expect(sent.some((a) => a.lost || a.status >= 500)).toBe(true);
              } else {
                // Refused: no manifest of this call landed.
                const wrote = sent.some(
                  (a) => a.call.key?.startsWith(`${PREFIX}manifests/`) && a.call.operation === "PutObject" && a.status === 200,
                );
                expect(wrote, `${o.op.kind} ${o.op.key} refused with ${String(error)} but its manifest landed`).toBe(false);
              }
            }
          }

          // With the resource's fence object (PROTOCOL.md, "Across the objects of one resource"): a write
          // lower than one already acknowledged on any key of the resource never lands after it. Without
          // it, only each key's own ratchet holds (checked above).
          for (const later of checkResourceFence ? outcomes : []) {
            const landed = mine(memory, later);
            const higherAcked = outcomes.some((o) => o.result.ok && o.token > later.token && o.ended < later.started);
            if (higherAcked) expect(landed, `token ${later.token} landed after a higher one was acknowledged`).toEqual([]);
          }
        },
      ),
      // 60 runs keep the server-free tier fast; 800 passed in 42 s.
      { numRuns: 60 },
    );
  });
});
