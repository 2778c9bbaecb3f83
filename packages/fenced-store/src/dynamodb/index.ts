// "@fenced/store/dynamodb": needs the `@aws-sdk/client-dynamodb` peer dependency. The public API only.
//
// The layers, from the API down (each imports only those below it):
//   store.ts       FencedDynamo: validates a call (options.ts) and runs it: JSON values, inline in their manifests
//   ../cas/        the algorithm every store over the conditional port shares (the write, the formats, StoreIo)
//   items.ts       the DynamoDB adapter of ../conditional/port.ts: PutItem conditioned on the item's etag
//   ../aws/        how a conditional write goes through the SDK: once, at once, never resent (sent-once.ts)
//   failures.ts    what a failed request means to this store (a missing table); the typed error (../cas/failures.ts)
export { FencedDynamo, type FencedDynamoOptions } from "./store.js";
