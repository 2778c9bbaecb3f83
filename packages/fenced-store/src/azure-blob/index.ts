// "@fenced/store/azure-blob": needs the `@azure/storage-blob` peer dependency. The public API only.
//
// The layers, from the API down (each imports only those below it):
//   store.ts       FencedAzureBlob: validates a call (options.ts, ../objects/body.ts) and runs it (../cas/calls.ts)
//   ../cas/        the algorithm every store over the conditional port shares (the write, the formats, StoreIo)
//   blobs.ts       the Azure Blob adapter of ../conditional/port.ts: Put Blob with If-Match / If-None-Match, on one try
//   failures.ts    what a failed request means to this store (a missing container); the typed error (../cas/failures.ts)
export { FencedAzureBlob, type AzureBlobBytes, type FencedAzureBlobOptions } from "./store.js";
export type { AzureContainer } from "./blobs.js";
