import { once } from "node:events";
import { createRequire } from "node:module";
import { createServer, type Server } from "node:http";
import { randomBytes } from "node:crypto";
import { AnonymousCredential, ContainerClient, newPipeline } from "@azure/storage-blob";
import { startAzureBlob, type StartedAzureBlob } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { portSuite } from "../conditional/port-suite-test-support.js";
import { ConditionalBlobs, classify, oneTryContainer } from "./blobs.js";

let azure: StartedAzureBlob;
let container: string;
beforeAll(async () => {
  azure = await startAzureBlob();
  container = await azure.createContainer();
}, 90_000);
afterAll(() => azure?.stop());

const blobs = (name = container): ConditionalBlobs =>
  new ConditionalBlobs(oneTryContainer(azure.client().getContainerClient(name)), 10_000);

describe("the conditional port on azurite (ConditionalBlobs)", () => {
  portSuite(() => blobs());

  it("revalidates with a 304: an unchanged blob is not read again", async () => {
    const p = blobs();
    const key = `revalidate/${randomBytes(8).toString("hex")}`;
    const written = await p.write(key, Buffer.from("one"), { ifNoneMatch: true });
    if (!written.ok) throw written.error;
    expect(await p.readIfChanged(key, written.etag)).toEqual({ unchanged: true });
    const swapped = await p.write(key, Buffer.from("two"), { ifMatch: written.etag });
    if (!swapped.ok) throw swapped.error;
    expect(await p.readIfChanged(key, written.etag)).toEqual({
      unchanged: false,
      object: { etag: swapped.etag, body: Buffer.from("two") },
    });
  });

  it("signs with a shared key made by the SDK's CommonJS build, the copy a CommonJS caller has (the SDK checks credentials with instanceof)", async () => {
    const commonJs = createRequire(import.meta.url)("@azure/storage-blob") as typeof import("@azure/storage-blob");
    const credential = new commonJs.StorageSharedKeyCredential(azure.accountName, azure.accountKey);
    const callers = new commonJs.BlobServiceClient(azure.url, credential).getContainerClient(container);
    // The condition of the test: the two builds' classes differ.
    expect(credential).not.toBeInstanceOf((await import("@azure/storage-blob")).StorageSharedKeyCredential);
    const p = new ConditionalBlobs(oneTryContainer(callers), 10_000);
    const key = `commonjs/${randomBytes(8).toString("hex")}`;
    const outcome = await p.write(key, Buffer.from("signed"), { ifNoneMatch: true });
    expect(outcome.ok ? "landed" : outcome.error).toBe("landed");
  });

  it("a blob someone leased refuses a write without its lease id: fatal, never a precondition (the ETag did not change)", async () => {
    const p = blobs();
    const key = `leased/${randomBytes(8).toString("hex")}`;
    const first = await p.write(key, Buffer.from("one"), { ifNoneMatch: true });
    if (!first.ok) throw first.error;
    await azure.client().getContainerClient(container).getBlobClient(key).getBlobLeaseClient().acquireLease(15);
    const outcome = await p.write(key, Buffer.from("two"), { ifMatch: first.etag });
    expect(outcome.ok ? "landed" : [outcome.failure, (outcome.error as { statusCode?: number }).statusCode]).toEqual(["fatal", 412]);
    expect(await p.read(key)).toEqual({ etag: first.etag, body: Buffer.from("one") });
  });

  it("reads a missing container as the container's failure, never as an absent record", async () => {
    const p = blobs("no-such-container");
    await expect(p.read("k")).rejects.toMatchObject({ statusCode: 404, code: "ContainerNotFound" });
    const outcome = await p.write("k", Buffer.from("v"), { ifNoneMatch: true });
    expect(outcome.ok ? "landed" : outcome.failure).toBe("fatal");
  });

  it("understands Azure's refusals by status and code: a create over a blob (409) and a stale ETag (412) are preconditions", async () => {
    const p = blobs();
    const key = `refusals/${randomBytes(8).toString("hex")}`;
    const first = await p.write(key, Buffer.from("one"), { ifNoneMatch: true });
    if (!first.ok) throw first.error;
    const exists = await p.write(key, Buffer.from("two"), { ifNoneMatch: true });
    expect(exists.ok ? undefined : [classify(exists.error), (exists.error as { statusCode?: number }).statusCode]).toEqual([
      "precondition",
      409,
    ]);
    const stale = await p.write(key, Buffer.from("two"), { ifMatch: "0x0" });
    expect(stale.ok ? undefined : [classify(stale.error), (stale.error as { statusCode?: number }).statusCode]).toEqual([
      "precondition",
      412,
    ]);
  });
});

/**
 * A server that answers every request as Azure answers a failure its SDK retries, and counts them:
 * azurite never throttles, nor times out inside. It stands in for Azure's answer only; the request it
 * counts is the SDK's, as the adapter sends it.
 */
async function failingServer(status: number, code: string): Promise<{ server: Server; url: string; requests: () => number }> {
  let requests = 0;
  const server = createServer((req, res) => {
    requests++;
    req.resume();
    req.on("end", () => {
      res.writeHead(status, { "content-type": "application/xml", "x-ms-error-code": code, location: req.url ?? "/" });
      res.end(`<?xml version="1.0" encoding="utf-8"?><Error><Code>${code}</Code><Message>answered by the test</Message></Error>`);
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as { port: number };
  return { server, url: `http://127.0.0.1:${port}/devstoreaccount1/c`, requests: () => requests };
}

describe("a conditional write goes to Azure once: the SDK never resends it", () => {
  for (const [status, code, failure, callers] of [
    [500, "OperationTimedOut", "ambiguous", 3],
    [500, "InternalError", "ambiguous", 3],
    // No Azure document says a throttled write was not applied: read back like any lost answer.
    [503, "ServerBusy", "ambiguous", 3],
    // A redirect is not followed (the SDK's redirect policy would resend the PUT where it points).
    // The caller's client follows it 20 times, each a new PUT.
    [307, "Redirected", "fatal", 21],
  ] as const) {
    it(`${status} ${code}: one request, understood as ${failure}; the caller's client, as built, sends ${callers} in all`, async () => {
      const { server, url, requests } = await failingServer(status, code);
      try {
        // The caller's client, with the SDK's default retry policy: the adapter must not use it as it is.
        const client = new ContainerClient(
          url,
          newPipeline(new AnonymousCredential(), { retryOptions: { maxTries: 3, retryDelayInMs: 1 } }),
        );
        const p = new ConditionalBlobs(oneTryContainer(client), 10_000);
        const outcome = await p.write("k", Buffer.from("v"), { ifNoneMatch: true });
        expect(outcome.ok ? "landed" : outcome.failure).toBe(failure);
        expect(requests()).toBe(1);
        // The condition of the test: the same upload on the caller's client is sent again on its own.
        await expect(client.getBlockBlobClient("k").upload(Buffer.from("v"), 1, { conditions: { ifNoneMatch: "*" } })).rejects.toThrow();
        expect(requests()).toBe(1 + callers);
      } finally {
        server.close();
      }
    });
  }
});

describe("faults of the azurite process", () => {
  /** Measured: a write to azurite alone answers in a few ms; a paused one is given this long. */
  const DEADLINE_MS = 500;

  it("a paused server: the write ends at its deadline as ambiguous; once resumed, the blob is as the write left it or as before", async () => {
    const p = blobs();
    const key = `paused/${randomBytes(8).toString("hex")}`;
    const before = await p.write(key, Buffer.from("before"), { ifNoneMatch: true });
    if (!before.ok) throw before.error;
    azure.faults.pause();
    try {
      const started = performance.now();
      const outcome = await p.write(key, Buffer.from("during"), { ifMatch: before.etag }, AbortSignal.timeout(DEADLINE_MS));
      expect(outcome.ok ? "landed" : outcome.failure).toBe("ambiguous");
      expect(performance.now() - started).toBeLessThan(DEADLINE_MS * 4);
    } finally {
      azure.faults.resume();
    }
    await azure.settled();
    expect(["before", "during"]).toContain((await p.read(key))?.body.toString());
  });

  it("a killed server: the write fails as unsent or ambiguous, never landed; restarted, a saved blob is there as it was", async () => {
    const p = blobs();
    const key = `killed/${randomBytes(8).toString("hex")}`;
    const before = await p.write(key, Buffer.from("before"), { ifNoneMatch: true });
    if (!before.ok) throw before.error;
    // azurite keeps its metadata in memory between saves (../servers' azure-blob.ts): wait for one.
    await azure.saved();
    await azure.faults.kill();
    try {
      const outcome = await p.write(key, Buffer.from("during"), { ifMatch: before.etag }, AbortSignal.timeout(DEADLINE_MS));
      expect(outcome.ok ? "landed" : outcome.failure).toMatch(/^(unsent|ambiguous)$/);
    } finally {
      await azure.faults.restart();
    }
    expect(await p.read(key)).toEqual({ etag: before.etag, body: Buffer.from("before") });
  });
});
