// "@fenced/store/s3": needs the `@aws-sdk/client-s3` peer dependency. The public API only.
//
// The layers, from the API down (each imports only those below it):
//   store.ts       FencedS3: validates a call (options.ts, body.ts) and runs it
//   read.ts        a key's current version: its manifest, then its body (read again if superseded meanwhile)
//   sweep.ts       the sweeper: orphaned data objects and incomplete uploads (judgeData); sweep-report.ts, its report
//   ../cas/        the algorithm every store over the conditional port shares: the write (write.ts, run.ts,
//                  decision.ts, intent.ts), the manifest and fence formats (manifest.ts, layout.ts), StoreIo (io.ts)
//   io.ts          S3Io: the algorithm's StoreIo over the S3 adapter, with data objects beside it
//   bodies.ts      a write's data objects (copy.ts, multipart.ts) and their cleanup (deletions.ts)
//   conditional.ts the conditional PUT and GET every decision rests on: the S3 adapter of ../conditional/port.ts
//   ../aws/        how a conditional PUT goes through the SDK: once, at once, never resent (sent-once.ts),
//                  on connections of the store's own (own-sockets.ts); what a failed request says (answers.ts)
//   failures.ts    what a failed request means to this store; the typed error a failed call throws (../cas/failures.ts)
//   ../deadline.ts the one deadline (timeoutMs) that bounds a call, shared with the PostgreSQL store
//   ../observe.ts  each call and S3 request as an OpenTelemetry span, each write's outcome on node:diagnostics_channel
export { FencedS3, type FencedS3Options } from "./store.js";
export { assertContentType } from "../objects/body.js";
