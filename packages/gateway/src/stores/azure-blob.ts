import type { ContainerClient } from "@azure/storage-blob";
import { z } from "zod";
import type { FencedAzureBlob, FencedAzureBlobOptions } from "@fenced/store/azure-blob";
import { said } from "./check.js";
import type { StoreDefinition } from "./registration.js";
import { restError } from "./azure-code.js";

/** createGateway's `objects` on Azure Blob: FencedAzureBlob on this container (its client's URL and credential); its maxBodyBytes caps limits.objectBytes (bodyLimits). */
export type AzureBlobObjectsOptions = { readonly container: ContainerClient } & FencedAzureBlobOptions;

export const azureBlobSection = z.strictObject({
  container: z.string().min(3).max(63).describe("the container, which must exist (enables /v1/objects on Azure Blob)"),
  connectionString: z.string().min(1).describe("the storage account's connection string (AccountName, AccountKey, BlobEndpoint, …)"),
  prefix: z.string().optional().describe("prefix of every blob the store writes, empty or ending in / (default fenced/)"),
  maxBodyBytes: z.number().int().min(0).optional().describe("largest body a write takes, kept inside its manifest blob (default 16 MiB)"),
  checkResourceFence: z
    .boolean()
    .optional()
    .describe("every write also reads the resource's fence blob, so that a register() refuses older tokens on every key (default true)"),
});

/** The objects family on Azure Blob Storage (FencedAzureBlob). */
export const azureBlobObjects: StoreDefinition<"objects", "azure-blob", typeof azureBlobSection, AzureBlobObjectsOptions, FencedAzureBlob> =
  {
    family: "objects",
    name: "azure-blob",
    title: "Azure Blob",
    fenceDescription: "Azure Blob's fence blob (present when the gateway serves objects from Azure Blob)",
    config: {
      section: azureBlobSection,
      settings: [
        { field: "container", variable: "FENCED_GATEWAY_AZURE_BLOB_CONTAINER", flag: "--azure-blob-container <name>", read: "text" },
        { field: "connectionString", variable: "FENCED_GATEWAY_AZURE_BLOB_CONNECTION_STRING", read: "text" },
        { field: "prefix", variable: "FENCED_GATEWAY_AZURE_BLOB_PREFIX", flag: "--azure-blob-prefix <prefix>", read: "text" },
      ],
      enabledBy: { field: "container", what: "container" },
      sweepFields: [],
    },

    accepts: (options): options is AzureBlobObjectsOptions => "container" in options,

    // Each body is kept whole in its manifest blob: a larger one than it takes is a 413 before any I/O.
    bodyLimits: (_options, store) => ({ maxBodyBytes: store.maxBodyBytes }),

    load: () => import("./azure-blob-driver.js").then((driver) => driver.azureBlobDriver),

    async prepare(store, { verify }, call) {
      if (verify ?? true) await call("verify", () => store.verify());
    },

    /**
     * Azure's error code, else the HTTP status, of an answer the store passes on (403, another 409,
     * 400), or the code of its client's failure before an answer (a TLS handshake): any RestError the
     * store did not type is the backend's, never the gateway's own.
     */
    backendCode: (err) => {
      const rest = restError(err);
      if (rest === undefined) return undefined;
      return rest.code ?? (rest.status === undefined ? "RestError" : `HTTP ${rest.status}`);
    },

    startRefusal(check, timeoutMs) {
      switch (check.problem) {
        case "access-denied":
          return `Azure refused the credentials${said(check)}: check the connection string's account name and key`;
        case "no-such-container":
          return "Azure answered that the container does not exist: create it, or name an existing one (azure-blob.container)";
        default:
      }
      switch (check.state) {
        case "refused":
          return `Azure Blob refused the connection${said(check)}: check the connection string's BlobEndpoint and that the service runs`;
        case "timeout":
          return `Azure Blob did not answer within ${timeoutMs} ms: check the connection string's endpoint and that it is reachable from here`;
        default:
          return `Azure Blob did not confirm the container${said(check)}: check the connection string and the container`;
      }
    },

    backendFix: (_code, operation) =>
      "check the connection string and that its account may read, write and delete blobs in the container" +
      (operation === "verify" ? ", or start with --no-verify" : ""),

    // Its sweep answers this without loading the driver.
    nothingToSweep:
      "nothing to sweep: every body is inside its key's manifest blob, so no write, failed or abandoned, leaves anything behind",
  };
