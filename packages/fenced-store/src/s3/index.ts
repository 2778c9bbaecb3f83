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
//   conditional.ts the conditional PUT and GET every decision rests on
//   sent-once.ts   how a conditional PUT goes through the SDK: once, at once, never resent (its own middlewares)
//   own-sockets.ts the connections of the store's own a conditional PUT goes on (no wait for the client's pool)
//   failures.ts    what a failed request means, and the typed error a failed call throws
//   ../deadline.ts the one deadline (timeoutMs) that bounds a call, shared with the PostgreSQL store
//   ../observe.ts  each call and S3 request as an OpenTelemetry span, each write's outcome on node:diagnostics_channel
export { FencedS3, type FencedS3Options } from "./store.js";
export { assertContentType } from "./body.js";

// Names this entry exported in 0.1.0 that a user names through the API itself; each goes in 0.3.0.
import type * as store from "./store.js";
/** @deprecated `Parameters<FencedS3["put"]>[1]` names it (a string, a Uint8Array or a Readable); removed from `@fenced/store/s3` in 0.3.0. */
export type S3Body = store.S3Body;
/** @deprecated `NonNullable<Awaited<ReturnType<FencedS3["getBytes"]>>>` names it; removed from `@fenced/store/s3` in 0.3.0. */
export type S3Bytes = store.S3Bytes;
/** @deprecated `NonNullable<Awaited<ReturnType<FencedS3["get"]>>>` names it; removed from `@fenced/store/s3` in 0.3.0. */
export type S3Object = store.S3Object;
/** @deprecated `Awaited<ReturnType<FencedS3["put"]>>` names it; removed from `@fenced/store/s3` in 0.3.0. */
export type S3PutResult = store.S3PutResult;
/** @deprecated `Awaited<ReturnType<FencedS3["verify"]>>` names it; removed from `@fenced/store/s3` in 0.3.0. */
export type S3VerifyResult = store.S3VerifyResult;
/** @deprecated `Parameters<FencedS3["put"]>[2]` names it; removed from `@fenced/store/s3` in 0.3.0. */
export type S3WriteOptions = store.S3WriteOptions;
/** @deprecated `Parameters<FencedS3["delete"]>[1]` names it; removed from `@fenced/store/s3` in 0.3.0. */
export type S3DeleteOptions = store.S3DeleteOptions;
/** @deprecated `Parameters<FencedS3["update"]>[2]` names it; removed from `@fenced/store/s3` in 0.3.0. */
export type S3UpdateOptions = store.S3UpdateOptions;
/** @deprecated `Parameters<FencedS3["transfer"]>[1]` names it; removed from `@fenced/store/s3` in 0.3.0. */
export type S3TransferOptions = store.S3TransferOptions;
/** @deprecated `{ signal?: AbortSignal }`; removed from `@fenced/store/s3` in 0.3.0. */
export type S3RegisterOptions = store.S3RegisterOptions;
/** @deprecated `{ signal?: AbortSignal }`; removed from `@fenced/store/s3` in 0.3.0. */
export type S3FenceOptions = store.S3FenceOptions;
/** @deprecated `{ signal?: AbortSignal }`; removed from `@fenced/store/s3` in 0.3.0. */
export type S3ReadOptions = store.S3ReadOptions;
/** @deprecated `Parameters<FencedS3["sweep"]>[0]` names it; removed from `@fenced/store/s3` in 0.3.0. */
export type S3SweepOptions = store.S3SweepOptions;
/** @deprecated `Awaited<ReturnType<FencedS3["sweep"]>>` names it; removed from `@fenced/store/s3` in 0.3.0. */
export type S3SweepReport = store.S3SweepReport;
/** @deprecated what `onProgress` of `sweep()`'s options is given; removed from `@fenced/store/s3` in 0.3.0. */
export type S3SweepProgress = store.S3SweepProgress;
/** @deprecated a count of `S3SweepReport`; removed from `@fenced/store/s3` in 0.3.0. */
export type S3SweepCount = store.S3SweepCount;
/** @deprecated a part of `S3SweepReport`; removed from `@fenced/store/s3` in 0.3.0. */
export type S3SweepUploadsKept = store.S3SweepUploadsKept;
