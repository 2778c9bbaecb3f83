// "@fenced/store/s3": needs the `@aws-sdk/client-s3` peer dependency. The public API only.
//
// The layers, from the API down (each imports only those below it):
//   store.ts       FencedS3: validates a call (options.ts, body.ts) and runs it
//   read.ts        a key's current version: its manifest, then its body (read again if superseded meanwhile)
//   sweep.ts       the sweeper: orphaned data objects and incomplete uploads (judgeData); sweep-report.ts, its report
//   write.ts       the write's driver: asks decide() what next, does that I/O (fence reads and raises, the manifest PUT: putManifest), after-failure (PROTOCOL.md "The write")
//   run.ts         one write's state; each fence answer stamped with where the write stood (fencesCurrent: freshness as a value)
//   decision.ts    the decision: refuse, read, raise, read the fences, or put — a pure function of what the write knows
//   intent.ts      what a write asks (refusal) and the manifest it builds
//   bodies.ts      a write's data objects (copy.ts, multipart.ts) and their cleanup (deletions.ts)
//   io.ts          StoreIo: manifest and fence reads, fence raises, what the store remembers
//   manifest.ts    the manifest and fence object formats, and what a fence object refuses; layout.ts, where each object lives
//   conditional.ts the conditional PUT and GET every decision rests on: the S3 adapter of ../conditional/port.ts
//   ../aws/        how a conditional PUT goes through the SDK: once, at once, never resent (sent-once.ts),
//                  on connections of the store's own (own-sockets.ts); what a failed request says (answers.ts)
//   failures.ts    what a failed request means to this store, and the typed error a failed call throws
//   ../deadline.ts the one deadline (timeoutMs) that bounds a call, shared with the PostgreSQL store
//   ../observe.ts  each call and S3 request as an OpenTelemetry span, each write's outcome on node:diagnostics_channel
export { FencedS3, type FencedS3Options } from "./store.js";
export { assertContentType } from "./body.js";
