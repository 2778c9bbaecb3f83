// S3's driver, on the AWS SDK's S3 client (its registration: s3.ts).
import { HeadBucketCommand, S3Client } from "@aws-sdk/client-s3";
import type { z } from "zod";
import { FencedS3 } from "@fenced/store/s3";
import { message, systemCode, within } from "./check.js";
import type { StoreDriver } from "./registration.js";
import type { S3ObjectsOptions, s3Section } from "./s3.js";
import { sweepLines } from "./s3-sweep.js";
import { CREDENTIALS_PROVIDER_ERROR } from "./aws-code.js";

/**
 * The S3 client and the store's options a configuration's section describes: what the gateway
 * serves objects with, and what `fenced-gateway sweep` sweeps. Destroy the client when done.
 */
function fromConfig(s3: z.output<typeof s3Section>): S3ObjectsOptions {
  const { bucket, endpoint, region, prefix, accessKeyId, secretAccessKey, forcePathStyle, inlineLimit, checkResourceFence, partSize } = s3;
  const client = new S3Client({
    region,
    forcePathStyle,
    ...(endpoint === undefined ? {} : { endpoint }),
    ...(accessKeyId === undefined || secretAccessKey === undefined ? {} : { credentials: { accessKeyId, secretAccessKey } }),
    // Streamed bodies of unknown length need no checksum trailer (radosgw answers such requests with 411).
    requestChecksumCalculation: "WHEN_REQUIRED",
    responseChecksumValidation: "WHEN_REQUIRED",
  });
  return {
    client,
    bucket,
    ...(prefix === undefined ? {} : { prefix }),
    ...(inlineLimit === undefined ? {} : { inlineLimit }),
    ...(checkResourceFence === undefined ? {} : { checkResourceFence }),
    ...(partSize === undefined ? {} : { partSize }),
  };
}

export const s3Driver: StoreDriver<typeof s3Section, S3ObjectsOptions, FencedS3> = {
  fromSection(s3, { closers }) {
    const options = fromConfig(s3);
    closers.push(() => Promise.resolve(options.client.destroy()));
    return Promise.resolve(options);
  },

  create: (options, timeoutMs) => new FencedS3(options.client, { ...options, timeoutMs: options.timeoutMs ?? timeoutMs }),

  /**
   * HEAD on the bucket. Its answer's status says what is wrong: 403 the credentials (or their rights
   * on the bucket), 404 the bucket; no answer at all, the endpoint. Read-only.
   */
  check: (_store, { client, bucket }, timeoutMs) =>
    within(
      timeoutMs,
      (abortSignal) => client.send(new HeadBucketCommand({ Bucket: bucket }), { abortSignal }),
      (err) => {
        const detail = message(err);
        const { name, code, $metadata } = (typeof err === "object" && err !== null ? err : {}) as {
          name?: unknown;
          code?: unknown;
          $metadata?: { httpStatusCode?: unknown };
        };
        if (name === CREDENTIALS_PROVIDER_ERROR) return { state: "misconfigured", problem: "no-credentials", code: name, detail };
        const status = $metadata?.httpStatusCode;
        if (status === 403) return { state: "misconfigured", problem: "access-denied", code: "403", detail };
        if (status === 404) return { state: "misconfigured", problem: "no-such-bucket", code: "404", detail };
        if (typeof status === "number") return { state: "error", code: String(status), detail };
        // No HTTP answer: a system error's code says why (ECONNREFUSED: nothing listens at the endpoint).
        const system = systemCode(err) ?? (typeof code === "string" ? code : undefined);
        return { state: system === "ECONNREFUSED" ? "refused" : "error", ...(system === undefined ? {} : { code: system }), detail };
      },
    ),

  async sweep(s3, { minAgeMs, dryRun, signal, storeTimeoutMs, line }) {
    const options = fromConfig(s3);
    try {
      const store = s3Driver.create(options, storeTimeoutMs);
      const lines = sweepLines(line);
      const report = await store.sweep({ minAgeMs, dryRun, signal, onProgress: lines.progress });
      lines.done(report);
      return { bucket: store.bucket, prefix: store.prefix, ...report };
    } finally {
      options.client.destroy();
    }
  },
};
