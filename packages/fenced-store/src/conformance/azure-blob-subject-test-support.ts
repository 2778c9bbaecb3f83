import { subscribe, unsubscribe } from "node:diagnostics_channel";
import type { ClientRequest } from "node:http";
import type { ContainerClient } from "@azure/storage-blob";
import { freePort, startAzureBlob } from "@fenced/servers";
import type { StoredObject } from "../contract.js";
import type { ObjectBody } from "../objects/body.js";
import { readAll } from "../objects/body.js";
import { FencedAzureBlob } from "../azure-blob/store.js";
import type { Subject } from "./subject-test-support.js";

/** Every blob of the container, by name, its ETag and bytes: what the store keeps. */
async function contents(container: ContainerClient): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {};
  for await (const blob of container.listBlobsFlat()) {
    const body = await container.getBlobClient(blob.name).downloadToBuffer();
    out[blob.name] = { etag: blob.properties.etag, body: body.toString("base64") };
  }
  return out;
}

/**
 * Counts the HTTP requests this process starts to `port` (Node's "http.client.request.start"
 * channel): the store sends on a pipeline of its own (../azure-blob/blobs.ts), so the caller's client
 * cannot count them.
 */
function countRequests(port: number): { tries: () => number } {
  let tries = 0;
  const host = `127.0.0.1:${port}`;
  const onStart = (message: unknown): void => {
    const { request } = message as { request: ClientRequest };
    if (request.getHeader("host") === host) tries++;
  };
  subscribe("http.client.request.start", onStart);
  return {
    tries: () => {
      // Read once the case is over: the subscription ends with its first reading.
      unsubscribe("http.client.request.start", onStart);
      return tries;
    },
  };
}

/** FencedAzureBlob on azurite: a container per open(); a client of a port nothing listens on for unreachable(). */
export async function azureBlobSubject(): Promise<Subject<ObjectBody, StoredObject>> {
  const azure = await startAzureBlob();
  const service = azure.client();
  return {
    async open() {
      const name = await azure.createContainer();
      const container = service.getContainerClient(name);
      return {
        store: new FencedAzureBlob(container),
        again: new FencedAzureBlob(azure.client().getContainerClient(name)),
        state: () => contents(container),
      };
    },
    async unreachable() {
      const port = await freePort();
      const { BlobServiceClient, StorageSharedKeyCredential } = await import("@azure/storage-blob");
      const credential = new StorageSharedKeyCredential(azure.accountName, azure.accountKey);
      const refusing = new BlobServiceClient(`http://127.0.0.1:${port}/${azure.accountName}`, credential).getContainerClient("nowhere");
      const { tries } = countRequests(port);
      return { store: new FencedAzureBlob(refusing, { timeoutMs: 2_000 }), tries };
    },
    value: (text) => text,
    text: async (read) => (await readAll(read.body)).toString("utf8"),
    stop: () => azure.stop(),
  };
}
