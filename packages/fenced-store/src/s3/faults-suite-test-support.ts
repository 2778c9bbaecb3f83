import { Readable } from "node:stream";
import type { S3Client } from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ContentionError, OutcomeUnknownError, ResourceMismatchError, StaleTokenError, VersionMismatchError } from "../errors.js";
import type { Fence } from "../fence.js";
import { FencedS3, type FencedS3Options } from "./store.js";
import { classify } from "./conditional.js";
import {
  auditManifests,
  fakeError,
  intercept,
  isDataUpload,
  isFenceWrite,
  isManifestPut,
  listKeys,
  type RequestInfo,
} from "./wire-test-support.js";
import type { StartBackend } from "./backend-test-support.js";

/** The suite, against the backend `start` gives (backend-test-support.ts). */
export function faultsSuite(start: StartBackend): void {
  let server: Awaited<ReturnType<StartBackend>>;

  beforeAll(async () => {
    server = await start();
  });
  afterAll(async () => {
    await server?.stop();
  });

  const fence = (token: number, resource = "faults"): Fence => ({ resource, token: BigInt(token) });

  /** A client whose first manifest PUT suffers `fault`; every other request goes through untouched. */
  async function faulty(
    fault: (send: () => Promise<unknown>) => Promise<unknown>,
  ): Promise<{ client: S3Client; bucket: string; store: FencedS3 }> {
    const client = server.client();
    const bucket = await server.createBucket();
    let armed = true;
    intercept(client, (info, send) => {
      if (armed && isManifestPut(info)) {
        armed = false;
        return fault(send);
      }
      return send();
    });
    return { client, bucket, store: new FencedS3(client, { bucket, inlineLimit: 0 }) };
  }

  describe("FencedS3: failures and ambiguous outcomes", () => {
    const landedThenLost: [string, number | undefined, string][] = [
      ["a timeout after the write landed", undefined, "TimeoutError"],
      ["a 500 after the write landed", 500, "InternalError"],
      ["the SDK's own retry finding the earlier attempt (412)", 412, "PreconditionFailed"],
    ];
    for (const [what, status, name] of landedThenLost) {
      it(`${what}: resolved as success by reading back the writeId`, async () => {
        const { client, bucket, store } = await faulty(async (send) => {
          await send();
          throw fakeError(status, name);
        });
        const history = auditManifests(client);
        const result = await store.put("k", "body", { fence: fence(1) });
        const stored = await store.getBytes("k");
        expect(stored?.version).toBe(result.version);
        expect(stored?.body.toString()).toBe("body");
        // Exactly one write landed (no duplicate from a retry): the next one is seq 2, and one data object exists.
        await store.put("k", "next", { fence: fence(1) });
        expect((await new FencedS3(client, { bucket }).getBytes("k"))?.body.toString()).toBe("next");
        expect(history.at(-1)?.seq).toBe(2);
        await store.flush();
        expect(await listKeys(client, bucket, "fenced/data/")).toHaveLength(1);
      });
    }

    const neverSent: [string, number | undefined, string][] = [
      ["a connection reset before the request reached the server", undefined, "ECONNRESET"],
      ["409 ConditionalRequestConflict", 409, "ConditionalRequestConflict"],
      ["radosgw's 500 for the loser of a race", 500, "UnknownError"],
    ];
    for (const [what, status, name] of neverSent) {
      it(`${what}: re-read and retried`, async () => {
        const { client, bucket, store } = await faulty(() => Promise.reject(fakeError(status, name)));
        const result = await store.put("k", "body", { fence: fence(1) });
        expect((await store.getBytes("k"))?.version).toBe(result.version);
        await store.flush();
        expect(await listKeys(client, bucket, "fenced/data/")).toHaveLength(1);
      });
    }

    it("a backend that wants quoted ETags in If-Match: the store switches spelling once and goes on", async () => {
      const client = server.client();
      const bucket = await server.createBucket();
      // Emulates such a backend on top of the real one: bare ETags are refused, quoted ones are sent on bare.
      intercept(client, (info, send) => {
        const ifMatch = info.input.IfMatch;
        if (typeof ifMatch === "string" && !ifMatch.startsWith('"')) return Promise.reject(fakeError(412, "PreconditionFailed"));
        if (typeof ifMatch === "string") info.input.IfMatch = ifMatch.replaceAll('"', "");
        return send();
      });
      const store = new FencedS3(client, { bucket });
      await store.put("k", "one", { fence: fence(1) });
      await store.put("k", "two", { fence: fence(1) });
      await store.put("k", "three", { fence: fence(2) });
      expect((await store.getBytes("k"))?.body.toString()).toBe("three");
      expect(await store.verify()).toEqual({ etagForm: "quoted" });
    });

    it("round trips: steady state is one conditional PUT (plus one GET of the resource fence by default)", async () => {
      const client = server.client();
      const bucket = await server.createBucket();
      const seen: RequestInfo[] = [];
      intercept(client, (info, send) => {
        seen.push(info);
        return send();
      });
      const name = (r: RequestInfo): string => `${r.command.replace("ObjectCommand", "")} ${r.key?.split("/")[1] ?? ""}`;
      /** The requests of one put, in rounds: requests sent in parallel are one round (sorted). */
      const count = async (
        store: FencedS3,
        token: number,
        key = "k",
        body = "body",
        parallel: [at: number, size: number][] = [],
      ): Promise<string[]> => {
        seen.length = 0;
        await store.put(key, body, { fence: fence(token, "rt") });
        // The deletion of a replaced body runs in the background (batched), after the put has returned.
        const names = seen
          .filter((r) => r.command !== "DeleteObjectsCommand")
          .map(name)
          .filter((n) => n !== "Delete data");
        for (const [at, size] of parallel)
          names.splice(
            at,
            size,
            names
              .slice(at, at + size)
              .sort()
              .join(" | "),
          );
        return names;
      };
      const fenced = new FencedS3(client, { bucket });
      // First write of a new key with a new token: the fence must be raised, and a raise needs the key's
      // owner known first, so the manifest is read alongside the fence; then the key is created.
      expect(await count(fenced, 1, "k", "body", [[0, 2]])).toEqual(["Get fences | Get manifests", "Put fences", "Put manifests"]);
      expect(await count(fenced, 1)).toEqual(["Get fences", "Put manifests"]); // steady state
      expect(await count(fenced, 1, "new")).toEqual(["Get fences", "Put manifests"]); // a new key, fence already raised
      // A body too large to inline is uploaded first: the fence must not be read before the upload, so
      // it is read after it, right before the manifest PUT ...
      const big = "b".repeat(70_000);
      await fenced.put("big", big, { fence: fence(1, "rt") });
      expect(await count(fenced, 1, "big", big)).toEqual(["Put data", "Get fences", "Put manifests"]);
      // ... and also while the upload runs when the fence may need raising (a new token); read again
      // after the raise only if the upload was still running then.
      const raised = await count(fenced, 2, "big", big, [[0, 3]]);
      expect(raised.slice(0, 2)).toEqual(["Get fences | Get manifests | Put data", "Put fences"]);
      expect(raised.slice(2).filter((n) => n !== "Get fences")).toEqual(["Put manifests"]);
      const objectOnly = new FencedS3(client, { bucket, checkResourceFence: false });
      // A store that has not seen the key tries a create, learns the key exists, reads it, swaps.
      expect(await count(objectOnly, 2)).toEqual(["Put manifests", "Get manifests", "Put manifests"]);
      expect(await count(objectOnly, 2)).toEqual(["Put manifests"]); // steady state: one request
      expect(await count(objectOnly, 2, "fresh")).toEqual(["Put manifests"]); // a new key: one request
      await fenced.flush();
    });
  });

  describe("FencedS3: what the client's own logger sees", () => {
    it("steady-state writes log no error: the fence read's 304 Not Modified is an answer, not a failure", async () => {
      const client = server.client();
      const bucket = await server.createBucket();
      const errors: unknown[] = [];
      const infos: { commandName?: string; metadata?: { httpStatusCode?: number } }[] = [];
      const noop = (): void => undefined;
      (client.config as { logger: unknown }).logger = {
        trace: noop,
        debug: noop,
        warn: noop,
        info: (e: (typeof infos)[number]) => infos.push(e),
        error: (e: unknown) => errors.push(e),
      };
      const store = new FencedS3(client, { bucket });
      await store.put("k", "first", { fence: fence(1) }); // reads the absent fence and manifest: two 404s
      errors.length = 0;
      infos.length = 0;
      for (let i = 0; i < 3; i++) await store.put("k", `body ${i}`, { fence: fence(1) });
      expect(errors).toEqual([]);
      // Each read the fence conditionally and was answered 304.
      expect(infos.filter((e) => e.commandName === "GetObjectCommand" && e.metadata?.httpStatusCode === 304)).toHaveLength(3);
    });
  });

  /** What a write that fails says, when an attempt of it landed unanswered and another write replaced it before the read-back. */
  describe("FencedS3: a refusal never hides an attempt that may have landed", () => {
    /** The outcome of a call: its result, or the error it threw. */
    const settled = (call: Promise<unknown>): Promise<unknown> =>
      call.then(
        (r) => r,
        (e: unknown) => e,
      );

    /**
     * A store whose first manifest PUT lands, then `replace` runs (another writer), then the answer is
     * lost; `later` answers every later manifest PUT (default: sent).
     */
    async function landedThenReplaced(
      replace: (bucket: string) => Promise<unknown>,
      options: { store?: Omit<FencedS3Options, "bucket">; later?: (send: () => Promise<unknown>) => Promise<unknown> } = {},
    ): Promise<{ client: S3Client; store: FencedS3; bucket: string; arm: () => void }> {
      const client = server.client();
      const bucket = await server.createBucket();
      let armed = false;
      let sent = 0;
      intercept(client, async (info, send) => {
        if (!armed || !isManifestPut(info)) return send();
        if (++sent > 1) return (options.later ?? ((s) => s()))(send);
        await send(); // lands ...
        await replace(bucket); // ... is replaced at once ...
        throw fakeError(undefined, "TimeoutError"); // ... and its answer is lost
      });
      const store = new FencedS3(client, { ...options.store, bucket });
      return { client, store, bucket, arm: () => (armed = true) };
    }

    const old: Fence = { resource: "r", token: 5n, holder: "h5" };
    const newer: Fence = { resource: "r", token: 6n, holder: "h6" };

    it("replaced by a newer lease: OutcomeUnknownError (the StaleTokenError as its cause), not a refusal", async () => {
      const { store, bucket, arm } = await landedThenReplaced((b) =>
        new FencedS3(server.client(), { bucket: b }).put("k", "from h6", { fence: newer }),
      );
      await store.put("k", "seed", { fence: old });
      arm();
      const outcome = await settled(store.put("k", "from h5", { fence: old }));
      expect(outcome).toBeInstanceOf(OutcomeUnknownError);
      expect((outcome as Error).cause).toBeInstanceOf(StaleTokenError);
      expect((await new FencedS3(server.client(), { bucket }).getBytes("k"))?.body.toString()).toBe("from h6");
    });

    it("a create replaced by a newer lease: OutcomeUnknownError; its body is deleted once replaced", async () => {
      const late: { store34?: FencedS3 } = {};
      const { client, bucket, store, arm } = await landedThenReplaced(() => late.store34!.put("k", "from 34", { fence: fence(34) }), {
        store: { inlineLimit: 0 },
      });
      const store34 = new FencedS3(server.client(), { bucket });
      late.store34 = store34;
      arm();
      const outcome = await settled(store.put("k", "from 33", { fence: fence(33) }));
      expect(outcome).toBeInstanceOf(OutcomeUnknownError);
      expect((outcome as Error).cause).toBeInstanceOf(StaleTokenError);
      expect((await store.getBytes("k"))?.body.toString()).toBe("from 34");
      await Promise.all([store.flush(), store34.flush()]);
      expect(await listKeys(client, bucket, "fenced/data/")).toEqual([]); // 34's body is inline; 33's was removed
    });

    it("with ifVersion, replaced by another write of the same lease: OutcomeUnknownError, not VersionMismatchError", async () => {
      const { store, arm } = await landedThenReplaced((b) =>
        new FencedS3(server.client(), { bucket: b }).put("k", "elsewhere", { fence: old }),
      );
      const seed = await store.put("k", "seed", { fence: old });
      arm();
      const outcome = await settled(store.put("k", "mine", { fence: old, ifVersion: seed.version }));
      expect(outcome).toBeInstanceOf(OutcomeUnknownError);
      expect((outcome as Error).cause).toBeInstanceOf(VersionMismatchError);
    });

    it("transferred to another resource: OutcomeUnknownError, not ResourceMismatchError", async () => {
      const to: Fence = { resource: "elsewhere", token: 1n, holder: "t" };
      const { store, arm } = await landedThenReplaced((b) => new FencedS3(server.client(), { bucket: b }).transfer("k", { from: old, to }));
      await store.put("k", "seed", { fence: old });
      arm();
      const outcome = await settled(store.put("k", "mine", { fence: old }));
      expect(outcome).toBeInstanceOf(OutcomeUnknownError);
      expect((outcome as Error).cause).toBeInstanceOf(ResourceMismatchError);
    });

    it("giving up after maxAttempts: OutcomeUnknownError, not ContentionError", async () => {
      const { store, arm } = await landedThenReplaced(
        (b) => new FencedS3(server.client(), { bucket: b }).put("k", "elsewhere", { fence: old }),
        {
          store: { maxAttempts: 2 },
          later: () => Promise.reject(fakeError(409, "ConditionalRequestConflict")),
        },
      );
      await store.put("k", "seed", { fence: old });
      arm();
      const outcome = await settled(store.put("k", "mine", { fence: old }));
      expect(outcome).toBeInstanceOf(OutcomeUnknownError);
      expect((outcome as Error).cause).toBeInstanceOf(ContentionError);
    });

    it("an attempt whose target was replaced directly by another's write did not land: the refusal stands", async () => {
      // radosgw's 500 for the loser of a race: the winner's manifest is the direct successor (next seq) of our attempt's target.
      const client = server.client();
      const bucket = await server.createBucket();
      const other = new FencedS3(server.client(), { bucket });
      let armed = false;
      intercept(client, async (info, send) => {
        if (!armed || !isManifestPut(info)) return send();
        armed = false;
        await other.put("k", "from h6", { fence: newer }); // the winner
        throw fakeError(500, "UnknownError"); // ours is refused, with an answer that leaves it open
      });
      const store = new FencedS3(client, { bucket });
      await store.put("k", "seed", { fence: old });
      armed = true;
      await expect(store.put("k", "from h5", { fence: old })).rejects.toBeInstanceOf(StaleTokenError);
    });

    it("register(): a fence PUT that landed unanswered, then a newer token registered: StaleTokenError (the fence refuses this lease for good)", async () => {
      const client = server.client();
      const bucket = await server.createBucket();
      const other = new FencedS3(server.client(), { bucket });
      let armed = true;
      intercept(client, async (info, send) => {
        if (!armed || !isFenceWrite(info)) return send();
        armed = false;
        await send(); // lands ...
        await other.register(fence(6)); // ... a newer token is registered ...
        throw fakeError(undefined, "TimeoutError"); // ... and the answer is lost
      });
      const outcome = await settled(new FencedS3(client, { bucket }).register(fence(5)));
      expect(outcome).toBeInstanceOf(StaleTokenError);
    });

    it("register(): an unanswered fence PUT overtaken by a newer token before a later attempt's 412: StaleTokenError", async () => {
      const client = server.client();
      const bucket = await server.createBucket();
      const other = new FencedS3(server.client(), { bucket });
      let first: (() => Promise<unknown>) | undefined;
      let puts = 0;
      intercept(client, async (info, send) => {
        if (!isFenceWrite(info)) return send();
        if (++puts === 1) {
          first = send; // held: not sent yet, no answer
          throw fakeError(undefined, "TimeoutError");
        }
        await first?.(); // the first lands late ...
        await other.register(fence(6)); // ... a newer token is registered ...
        return send(); // ... and the second is refused (412)
      });
      const outcome = await settled(new FencedS3(client, { bucket }).register(fence(5)));
      expect(outcome).toBeInstanceOf(StaleTokenError);
    });
  });

  describe("FencedS3: an error that carries a 2xx status", () => {
    it("is ambiguous: the PUT was accepted, only its answer failed", () => {
      for (const status of [200, 201, 204]) expect(classify(fakeError(status, "Error"))).toBe("ambiguous");
      expect(classify(fakeError(403, "AccessDenied"))).toBe("fatal");
    });

    it("a manifest PUT whose answer fails after its 200 status line: read back, and the write succeeded", async () => {
      const { store } = await faulty(async (send) => {
        await send();
        throw fakeError(200, "Error"); // the body of the answer could not be read
      });
      const result = await store.put("k", "body", { fence: fence(1) });
      expect((await store.getBytes("k"))?.version).toBe(result.version);
    });
  });

  describe("FencedS3: an acknowledged write's body stays readable", () => {
    for (const kind of ["bytes", "stream"] as const) {
      it(`an attempt that landed and lost its answer, replaced by another write of the same lease before the read-back (${kind}): the write fails or its body is readable`, async () => {
        const lease: Fence = { resource: "faults", token: 7n, holder: "lease-7" };
        const late: { other?: FencedS3 } = {};
        const { client, bucket, store } = await faulty(async (send) => {
          await send(); // the first attempt lands, naming its data object ...
          await late.other?.put("k", "from the same lease, elsewhere", { fence: lease }); // ... is replaced at once ...
          await late.other?.flush(); // ... and the body the replaced manifest named is deleted ...
          throw fakeError(undefined, "TimeoutError"); // ... and the first writer never heard back.
        });
        late.other = new FencedS3(server.client(), { bucket });
        const text = "from the first writer ".repeat(10);
        const body = kind === "bytes" ? text : Readable.from([Buffer.from(text)], { objectMode: false });
        const outcome = await store.put("k", body, { fence: lease }).then(
          (r) => r,
          (e: unknown) => e,
        );
        const now = await new FencedS3(client, { bucket }).getBytes("k"); // must not fail: the current body exists
        if (outcome instanceof Error) {
          // Not a refusal (it may have landed): an error whose outcome is unknown.
          for (const refusal of [StaleTokenError, VersionMismatchError, ResourceMismatchError]) expect(outcome).not.toBeInstanceOf(refusal);
          expect(now?.body.toString()).toBe("from the same lease, elsewhere");
        } else {
          expect(now?.version).toBe((outcome as { version: string }).version);
          expect(now?.body.toString()).toBe(text);
        }
        // Bytes in memory can always be sent again: that write must succeed.
        if (kind === "bytes") expect(outcome).not.toBeInstanceOf(Error);
        await store.flush();
        const data = await listKeys(client, bucket, "fenced/data/");
        expect(data).toHaveLength(outcome instanceof Error ? 0 : 1); // no orphan: only the current body
      });
    }

    it("a 412 from the SDK's retry after the attempt landed, then a failed read-back: the body the manifest names is kept", async () => {
      const client = server.client();
      const bucket = await server.createBucket();
      let phase = 0;
      intercept(client, async (info, send) => {
        if (phase === 0 && isManifestPut(info)) {
          phase = 1;
          await send(); // lands ...
          throw fakeError(412, "PreconditionFailed"); // ... and the SDK's retry of it is refused
        }
        if (phase === 1 && info.command === "GetObjectCommand" && (info.key?.includes("/manifests/") ?? false)) {
          phase = 2;
          throw fakeError(403, "AccessDenied"); // the read-back that would tell fails
        }
        return send();
      });
      const store = new FencedS3(client, { bucket, inlineLimit: 0 });
      const outcome = await store.put("k", "the body", { fence: fence(1) }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(outcome).toBeInstanceOf(Error);
      for (const refusal of [StaleTokenError, VersionMismatchError, ResourceMismatchError]) expect(outcome).not.toBeInstanceOf(refusal);
      await store.flush();
      // The attempt did land: its manifest is current and its body must still be there.
      expect((await new FencedS3(client, { bucket }).getBytes("k"))?.body.toString()).toBe("the body");
    });
  });

  describe("FencedS3: giving up, aborting", () => {
    it("giving up after maxAttempts conflicting writes, or on a key that keeps changing while read, is a ContentionError", async () => {
      const client = server.client();
      const bucket = await server.createBucket();
      intercept(client, (info, send) => (isManifestPut(info) ? Promise.reject(fakeError(409, "ConditionalRequestConflict")) : send()));
      const store = new FencedS3(client, { bucket, maxAttempts: 2 });
      const err: unknown = await store.put("k", "x", { fence: fence(1) }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ContentionError);
      expect(err).toMatchObject({ key: "k", attempts: 2 });

      const writer = new FencedS3(server.client(), { bucket, inlineLimit: 0 });
      await writer.put("big", "in a data object", { fence: fence(1) });
      const reads = server.client();
      // Each body is found gone because the key moved on after its manifest was read (a newer manifest
      // each round; the same manifest twice would be a body deleted while named: CorruptStateError).
      let moves = 0;
      intercept(reads, async (info, send) => {
        if (!(info.key?.includes("/data/") ?? false)) return send();
        await writer.put("big", `moved ${++moves}`, { fence: fence(1) });
        throw fakeError(404, "NoSuchKey");
      });
      await expect(new FencedS3(reads, { bucket, maxAttempts: 3 }).get("big")).rejects.toBeInstanceOf(ContentionError);
      await expect(new FencedS3(reads, { bucket, maxAttempts: 3 }).getBytes("big")).rejects.toBeInstanceOf(ContentionError);

      // update: the key changes under every read-modify-write round.
      let round = 0;
      const updated = await writer
        .update(
          "big",
          async () => {
            await writer.put("big", `moved ${++round}`, { fence: fence(1) });
            return "never";
          },
          { fence: fence(1), maxAttempts: 2 },
        )
        .catch((e: unknown) => e);
      expect(updated).toBeInstanceOf(ContentionError);
      expect(updated).toMatchObject({ key: "big", attempts: 2 });
    });

    it("an abort signal aborts the request in flight; the write throws the signal's reason and leaves nothing behind", async () => {
      const client = server.client();
      const bucket = await server.createBucket();
      let uploadSent: (() => void) | undefined;
      intercept(client, (info, send) => {
        if (isDataUpload(info)) uploadSent?.();
        return send();
      });
      const store = new FencedS3(client, { bucket });
      for (const contentLength of [1_000_000, undefined]) {
        const sent = new Promise<void>((r) => (uploadSent = r));
        const controller = new AbortController();
        // A body that sends a little (one part, when multipart) and then never ends: its upload stays in flight until aborted.
        const body = new Readable({ read() {} });
        body.push(Buffer.alloc(contentLength === undefined ? 9 * 1024 * 1024 : 1024, 1));
        const write = store.put("k", body, { fence: fence(1), contentLength, signal: controller.signal });
        await sent;
        await new Promise((r) => setTimeout(r, 100));
        const reason = new Error("the lease was lost");
        controller.abort(reason);
        const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error("the write did not stop")), 5_000));
        await expect(Promise.race([write, timeout])).rejects.toBe(reason);
      }
      await store.flush();
      expect(await listKeys(client, bucket, "fenced/manifests/")).toEqual([]);
      expect(await listKeys(client, bucket, "fenced/data/")).toEqual([]);
      // A signal aborted already: its reason, before any request.
      const already = AbortSignal.abort(new Error("gone"));
      await expect(store.put("k", "x", { fence: fence(1), signal: already })).rejects.toMatchObject({ message: "gone" });
      await expect(store.register(fence(1), { signal: already })).rejects.toMatchObject({ message: "gone" });
    });
  });
}
