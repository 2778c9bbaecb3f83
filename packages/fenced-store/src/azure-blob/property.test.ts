import { BlockBlobClient } from "@azure/storage-blob";
import { startAzureBlob, type StartedAzureBlob } from "@fenced/servers";
import { afterAll, beforeAll } from "vitest";
import { decodeManifest, type ManifestHeader } from "../cas/manifest.js";
import { writersProperty } from "../cas/writers-property-test-support.js";
import { FencedAzureBlob } from "./store.js";

/**
 * FencedAzureBlob under random concurrent interleavings on azurite: the property of every store of
 * the object algorithm (../cas/writers-property-test-support.ts), on the history of every manifest
 * blob a Put Blob wrote (201), seen by a wrapper of the SDK's upload: the store sends on a client of
 * its own.
 */
let azure: StartedAzureBlob;
let container: string;
/** Every manifest blob a conditional Put Blob wrote, as azurite answered it (201). */
const accepted: ManifestHeader[] = [];

/**
 * Keeps every manifest a Put Blob wrote, as the SDK the store sends with resolved it (201): the
 * store builds its own client, so the audit wraps the SDK's upload itself, for every client.
 */
function auditManifests(): void {
  type Upload = (this: BlockBlobClient, ...args: Parameters<BlockBlobClient["upload"]>) => ReturnType<BlockBlobClient["upload"]>;
  const upload = Object.getOwnPropertyDescriptor(BlockBlobClient.prototype, "upload")?.value as Upload;
  BlockBlobClient.prototype.upload = async function (this: BlockBlobClient, ...args: Parameters<Upload>) {
    const answer = await upload.apply(this, args);
    const [body] = args;
    if (this.name.includes("/manifests/") && Buffer.isBuffer(body))
      accepted.push(decodeManifest(this.name.replace(/^.*?\/manifests\//, ""), body, "azure-blob").header);
    return answer;
  };
}

beforeAll(async () => {
  azure = await startAzureBlob();
  container = await azure.createContainer();
  auditManifests();
}, 90_000);
afterAll(() => azure?.stop());

writersProperty(
  "FencedAzureBlob under random concurrent interleavings",
  (o) => new FencedAzureBlob(azure.client().getContainerClient(container), o),
  (i) => `writer ${i}`,
  accepted,
);
