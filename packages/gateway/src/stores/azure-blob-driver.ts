// Azure Blob's driver, on Azure's Blob SDK (its registration: azure-blob.ts).
import { BlobServiceClient } from "@azure/storage-blob";
import { FencedAzureBlob } from "@fenced/store/azure-blob";
import { message, systemCode, within } from "./check.js";
import type { StoreDriver } from "./registration.js";
import type { AzureBlobObjectsOptions, azureBlobSection } from "./azure-blob.js";
import { restError } from "./azure-code.js";

export const azureBlobDriver: StoreDriver<typeof azureBlobSection, AzureBlobObjectsOptions, FencedAzureBlob> = {
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
};
