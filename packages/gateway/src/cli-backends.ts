import { S3Client } from "@aws-sdk/client-s3";
import type { FencedS3Options } from "@fenced/store/s3";
import type { GatewayConfig } from "./config.js";

/**
 * The S3 client and the store's options a configuration's `s3` section describes: what the gateway
 * serves objects with, and what `fenced-gateway sweep` sweeps. Destroy the client when done.
 */
export function s3Backend(s3: NonNullable<GatewayConfig["s3"]>): { client: S3Client } & FencedS3Options {
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
