import { BlobServiceClient, type ContainerClient } from "@azure/storage-blob";
import { z } from "zod";
import { FencedAzureBlob, type FencedAzureBlobOptions } from "@fenced/store/azure-blob";
import { message, said, systemCode, within } from "./check.js";
import type { StoreDefinition } from "./registration.js";

/** createGateway's `objects` on Azure Blob: FencedAzureBlob on this container (its client's URL and credential). */
export type AzureBlobObjectsOptions = { readonly container: ContainerClient } & FencedAzureBlobOptions;

const section = z.strictObject({
  container: z.string().min(3).max(63).describe("the container, which must exist (enables /v1/objects on Azure Blob)"),
  connectionString: z.string().min(1).describe("the storage account's connection string (AccountName, AccountKey, BlobEndpoint, …)"),
  prefix: z.string().optional().describe("prefix of every blob the store writes, empty or ending in / (default fenced/)"),
  maxBodyBytes: z.number().int().min(0).optional().describe("largest body a write takes, kept inside its manifest blob (default 16 MiB)"),
  checkResourceFence: z
    .boolean()
    .optional()
    .describe("every write also reads the resource's fence blob, so that a register() refuses older tokens on every key (default true)"),
});

/** Azure's error answer, as its SDK's RestError carries it (by shape: the caller's SDK copy may not be this module's). */
function restError(err: unknown): { code: string | undefined; status: number | undefined } | undefined {
  if (typeof err !== "object" || err === null || (err as { name?: unknown }).name !== "RestError") return undefined;
  const { code, statusCode } = err as { code?: unknown; statusCode?: unknown };
  return { code: typeof code === "string" ? code : undefined, status: typeof statusCode === "number" ? statusCode : undefined };
}

/** Why Azure Blob has nothing to sweep: what the report and stderr say. */
const NOTHING_TO_SWEEP =
  "nothing to sweep: every body is inside its key's manifest blob, so no write, failed or abandoned, leaves anything behind";

/** The objects family on Azure Blob Storage (FencedAzureBlob). */
export const azureBlobObjects: StoreDefinition<"objects", "azure-blob", typeof section, AzureBlobObjectsOptions, FencedAzureBlob> = {
  family: "objects",
  name: "azure-blob",
  title: "Azure Blob",
  fenceDescription: "Azure Blob's fence blob (present when the gateway serves objects from Azure Blob)",
  config: {
    section,
    enabledBy: { field: "container", what: "container", variable: "FENCED_GATEWAY_AZURE_BLOB_CONTAINER", flag: "--azure-blob-container" },
    sweepFields: [],
  },

  accepts: (options): options is AzureBlobObjectsOptions => "container" in options,

  fromSection({ container, connectionString, prefix, maxBodyBytes, checkResourceFence }) {
    return Promise.resolve({
      container: BlobServiceClient.fromConnectionString(connectionString).getContainerClient(container),
      ...(prefix === undefined ? {} : { prefix }),
      ...(maxBodyBytes === undefined ? {} : { maxBodyBytes }),
      ...(checkResourceFence === undefined ? {} : { checkResourceFence }),
    });
  },

  create: ({ container, ...options }, timeoutMs) =>
    new FencedAzureBlob(container, { ...options, timeoutMs: options.timeoutMs ?? timeoutMs }),

  /** The container's properties: 404 the container, 403 the credentials; no answer, the endpoint. Read-only. */
  check: (_store, { container }, timeoutMs) =>
    within(
      timeoutMs,
      (abortSignal) => container.getProperties({ abortSignal }),
      (err) => {
        const detail = message(err);
        const rest = restError(err);
        if (rest?.status === 404) return { state: "misconfigured", problem: "no-such-container", code: rest.code ?? "404", detail };
        if (rest?.status === 403) return { state: "misconfigured", problem: "access-denied", code: rest.code ?? "403", detail };
        if (rest?.status !== undefined) return { state: "error", code: rest.code ?? String(rest.status), detail };
        const system = systemCode(err) ?? rest?.code;
        return { state: system === "ECONNREFUSED" ? "refused" : "error", ...(system === undefined ? {} : { code: system }), detail };
      },
    ),

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

  sweeps: false,

  sweep(_section, { line }) {
    line(`Azure Blob: ${NOTHING_TO_SWEEP}`);
    return Promise.resolve({ swept: false, why: NOTHING_TO_SWEEP });
  },
};
