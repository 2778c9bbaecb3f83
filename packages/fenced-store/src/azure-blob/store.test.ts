import { Readable } from "node:stream";
import { randomBytes } from "node:crypto";
import { startAzureBlob, type StartedAzureBlob } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InvalidArgumentError } from "@fenced/fence";
import { OutcomeUnknownError, StaleTokenError, StoreSetupError, StoreUnavailableError } from "../errors.js";
import type { Fence } from "../fence.js";
import { FencedAzureBlob } from "./store.js";
import type { FencedAzureBlobOptions } from "./options.js";

/**
 * FencedAzureBlob on azurite, beyond the conformance suite (conformance/servers.test.ts): its set-up
 * checks, its bodies (streams, content types, the maxBodyBytes limit), and each fault of the azurite
 * process ending a call with a typed error within its deadline.
 */
let azure: StartedAzureBlob;

async function newStore(options: FencedAzureBlobOptions = {}): Promise<FencedAzureBlob> {
  const name = await azure.createContainer();
  return new FencedAzureBlob(azure.client().getContainerClient(name), options);
}

beforeAll(async () => {
  azure = await startAzureBlob();
}, 90_000);
afterAll(() => azure?.stop());

const fence = (token: number, holder = "h"): Fence => ({ resource: "reports", token: BigInt(token), holder });
const key = (): string => `reports/${randomBytes(6).toString("hex")}`;
const text = async (store: FencedAzureBlob, k: string): Promise<string | undefined> => (await store.getBytes(k))?.body.toString("utf8");

describe("FencedAzureBlob's set-up", () => {
  it("verify() passes on a container; a missing one is a StoreSetupError naming it, on every call, and nothing is written", async () => {
    await (await newStore()).verify();
    const store = new FencedAzureBlob(azure.client().getContainerClient("never-created"));
    await expect(store.verify()).rejects.toMatchObject({ name: "StoreSetupError", backend: "azure-blob", problem: "no-such-container" });
    const err = await store.put(key(), "v", { fence: fence(1) }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StoreSetupError);
    expect(err).toMatchObject({ backend: "azure-blob", problem: "no-such-container", applied: "no" });
    await expect(store.get(key())).rejects.toBeInstanceOf(StoreSetupError);
  });

  it("refuses a container client that is not one, and options out of range, before any I/O", () => {
    expect(() => new FencedAzureBlob({} as never)).toThrow(InvalidArgumentError);
    const container = azure.client().getContainerClient("any");
    expect(() => new FencedAzureBlob({ url: container.url, containerName: "any", credential: {} })).toThrow(InvalidArgumentError);
    // A token credential (@azure/identity's shape): its policy would resend a write on a 401 challenge.
    const token = { getToken: () => Promise.resolve({ token: "t", expiresOnTimestamp: Date.now() + 60_000 }) };
    expect(() => new FencedAzureBlob({ url: container.url, containerName: "any", credential: token })).toThrow(InvalidArgumentError);
    expect(() => new FencedAzureBlob(container, { maxBodyBytes: 512 * 1024 * 1024 })).toThrow(InvalidArgumentError);
    expect(() => new FencedAzureBlob(container, { prefix: "no-slash" })).toThrow(InvalidArgumentError);
  });
});

describe("FencedAzureBlob's bodies", () => {
  it("keeps the content type and the bytes of a string, a Uint8Array and a stream", async () => {
    const store = await newStore();
    const k = key();
    await store.put(k, "text", { fence: fence(1), contentType: "text/plain" });
    expect(await store.getBytes(k)).toMatchObject({ body: Buffer.from("text"), contentType: "text/plain", token: 1n });
    const bytes = randomBytes(70_000);
    await store.put(k, new Uint8Array(bytes), { fence: fence(1) });
    expect((await store.getBytes(k))?.body).toEqual(bytes);
    await store.put(k, Readable.from([bytes.subarray(0, 10), bytes.subarray(10)]), { fence: fence(2), contentLength: bytes.length });
    const read = await store.get(k);
    expect(read?.size).toBe(bytes.length);
    const chunks: Buffer[] = [];
    for await (const chunk of read?.body ?? []) chunks.push(chunk as Buffer);
    expect(Buffer.concat(chunks)).toEqual(bytes);
  });

  it("refuses a body past maxBodyBytes, in memory or as a stream, and a stream that differs from contentLength: InvalidArgumentError, nothing written", async () => {
    const store = await newStore({ maxBodyBytes: 1024 });
    const k = key();
    await store.put(k, "kept", { fence: fence(1) });
    const refused = [
      store.put(k, randomBytes(1025), { fence: fence(2) }),
      store.put(k, Readable.from([randomBytes(1000), randomBytes(1000)]), { fence: fence(2) }),
      store.put(k, Readable.from([randomBytes(10)]), { fence: fence(2), contentLength: 11 }),
    ];
    for (const call of refused) await expect(call).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(await store.getBytes(k)).toMatchObject({ body: Buffer.from("kept"), token: 1n });
    await store.put(k, randomBytes(1024), { fence: fence(2) });
    expect((await store.getBytes(k))?.body.length).toBe(1024);
  });

  it("a stream that stalls: the caller's signal ends the call with its reason, and nothing is written", async () => {
    const store = await newStore();
    const k = key();
    const stalled = new Readable({ read() {} });
    stalled.push("part");
    const reason = new Error("the caller gave up");
    const controller = new AbortController();
    const call = store.put(k, stalled, { fence: fence(1), signal: controller.signal });
    setTimeout(() => controller.abort(reason), 50);
    await expect(call).rejects.toBe(reason);
    expect(await store.getBytes(k)).toBeUndefined();
  });
});

describe("FencedAzureBlob under faults of the azurite process", () => {
  /** azurite answers a write in a few ms here; a paused one is given this long per call. */
  const TIMEOUT_MS = 500;

  it("paused: a put ends by its deadline, typed (OutcomeUnknownError once a manifest write was sent, else StoreUnavailableError); resumed, the ratchet holds", async () => {
    const store = await newStore({ timeoutMs: TIMEOUT_MS });
    const k = key();
    await store.put(k, "v1", { fence: fence(1) });
    azure.faults.pause();
    let err: unknown;
    const started = performance.now();
    try {
      err = await store.put(k, "v2", { fence: fence(2) }).catch((e: unknown) => e);
    } finally {
      azure.faults.resume();
    }
    expect(performance.now() - started).toBeLessThan(TIMEOUT_MS * 4);
    expect(err instanceof OutcomeUnknownError || err instanceof StoreUnavailableError, String(err)).toBe(true);
    await azure.settled();
    await expect(store.put(k, "stale", { fence: fence(1, "other") })).rejects.toBeInstanceOf(StaleTokenError);
    await store.put(k, "v3", { fence: fence(3) });
    expect(await text(store, k)).toBe("v3");
  });

  it("paused: a get is StoreUnavailableError (timeout) by its deadline", async () => {
    const store = await newStore({ timeoutMs: TIMEOUT_MS });
    const k = key();
    await store.put(k, "v1", { fence: fence(1) });
    azure.faults.pause();
    try {
      await expect(store.get(k)).rejects.toMatchObject({ name: "StoreUnavailableError", reason: "timeout", applied: "no" });
    } finally {
      azure.faults.resume();
    }
    await azure.settled();
  });

  it("killed: a put is StoreUnavailableError or OutcomeUnknownError, never a plain error; restarted, the body and the ratchet are as saved", async () => {
    const store = await newStore({ timeoutMs: TIMEOUT_MS });
    const k = key();
    await store.put(k, "kept", { fence: fence(5) });
    // azurite keeps its metadata in memory between saves (@fenced/servers, azure-blob.ts): wait for one.
    await azure.saved();
    await azure.faults.kill();
    let err: unknown;
    try {
      err = await store.put(k, "lost", { fence: fence(6) }).catch((e: unknown) => e);
    } finally {
      await azure.faults.restart();
    }
    expect(err instanceof OutcomeUnknownError || err instanceof StoreUnavailableError, String(err)).toBe(true);
    expect(err).toMatchObject({ backend: "azure-blob" });
    expect(await text(store, k)).toBe("kept");
    await expect(store.put(k, "stale", { fence: fence(4) })).rejects.toBeInstanceOf(StaleTokenError);
  });
});
