import type { S3Client } from "@aws-sdk/client-s3";
import { z } from "zod";
import type { FencedS3, FencedS3Options } from "@fenced/store/s3";
import { said } from "./check.js";
import type { StoreDefinition } from "./registration.js";
import { awsCode } from "./aws-code.js";

/** createGateway's `objects`: FencedS3 with this client (create it with requestChecksumCalculation "WHEN_REQUIRED" for radosgw). */
export type S3ObjectsOptions = { readonly client: S3Client } & FencedS3Options;

export const s3Section = z
  .strictObject({
    bucket: z.string().min(1).describe("the bucket (enables /v1/objects)"),
    endpoint: z.string().url().optional().describe("S3 endpoint URL (default: AWS)"),
    region: z.string().min(1).default("us-east-1").describe("S3 region (default us-east-1)"),
    prefix: z.string().optional().describe("prefix of every object the store writes, empty or ending in / (default fenced/)"),
    accessKeyId: z.string().min(1).optional().describe("S3 access key id (default: the AWS SDK's credential chain)"),
    secretAccessKey: z.string().min(1).optional().describe("S3 secret access key, given with accessKeyId"),
    forcePathStyle: z.boolean().default(true).describe("path-style requests (bucket in the path, not the host name; default true)"),
    inlineLimit: z
      .number()
      .int()
      .min(0)
      .optional()
      .describe("bodies up to this many bytes are stored inside the manifest, one PUT per write (default 65536; 0: never)"),
    checkResourceFence: z
      .boolean()
      .optional()
      .describe(
        "every write also reads the resource's fence object, so that a register() refuses older tokens on every key (default true)",
      ),
    partSize: z.number().int().optional().describe("multipart part size for bodies of unknown length, at least 5 MiB (default 8 MiB)"),
  })
  .refine(
    (s) => (s.accessKeyId === undefined) === (s.secretAccessKey === undefined),
    "give both accessKeyId and secretAccessKey, or neither (the AWS default chain)",
  );

/** The objects family on S3 (FencedS3). */
export const s3Objects: StoreDefinition<"objects", "s3", typeof s3Section, S3ObjectsOptions, FencedS3> = {
  family: "objects",
  name: "s3",
  title: "S3",
  fenceDescription: "S3's fence object (present when the gateway serves objects)",
  config: {
    section: s3Section,
    settings: [
      { field: "bucket", variable: "FENCED_GATEWAY_S3_BUCKET", flag: "--s3-bucket <bucket>", read: "text" },
      { field: "endpoint", variable: "FENCED_GATEWAY_S3_ENDPOINT", flag: "--s3-endpoint <url>", read: "text" },
      { field: "region", variable: "FENCED_GATEWAY_S3_REGION", flag: "--s3-region <region>", read: "text" },
      { field: "prefix", variable: "FENCED_GATEWAY_S3_PREFIX", flag: "--s3-prefix <prefix>", read: "text" },
      { field: "accessKeyId", variable: "FENCED_GATEWAY_S3_ACCESS_KEY_ID", read: "text" },
      { field: "secretAccessKey", variable: "FENCED_GATEWAY_S3_SECRET_ACCESS_KEY", read: "text" },
    ],
    enabledBy: { field: "bucket", what: "bucket" },
    sweepFields: [""],
  },

  accepts: (options): options is S3ObjectsOptions => "bucket" in options,

  // A body up to the store's inlineLimit, read whole, goes inside its manifest: one PUT, no data object.
  bodyLimits: ({ inlineLimit }) => (inlineLimit === undefined ? {} : { inlineBytes: inlineLimit }),

  load: () => import("./s3-driver.js").then((driver) => driver.s3Driver),

  async prepare(store, { verify }, call) {
    if (verify ?? true) await call("verify", () => store.verify());
  },

  backendCode: awsCode,

  startRefusal(check, timeoutMs) {
    switch (check.problem) {
      case "access-denied":
        return `S3 refused the credentials (403${said({ detail: check.detail })}): check the access key id and secret, and that they may use the bucket`;
      case "no-such-bucket":
        return "S3 answered that the bucket does not exist (404): create it, or name an existing one (s3.bucket)";
      case "no-credentials":
        return `no S3 credentials could be loaded${said({ detail: check.detail })}: give s3.accessKeyId and s3.secretAccessKey, or set up the AWS SDK's credential chain`;
      default:
    }
    switch (check.state) {
      case "refused":
        return `S3 refused the connection${said(check)}: check the endpoint URL (s3.endpoint) and that the server runs`;
      case "timeout":
        return `S3 did not answer within ${timeoutMs} ms: check the endpoint URL (s3.endpoint) and that it is reachable from here`;
      default:
        return `S3 did not confirm the bucket${said(check)}: check the endpoint, the credentials and the bucket`;
    }
  },

  backendFix: (_code, operation) =>
    operation === "sweep"
      ? "check the endpoint, the credentials and that they may list, read and delete objects and abort multipart uploads in the bucket"
      : "check the endpoint, the credentials and that they may read, write and delete objects in the bucket" +
        (operation === "verify" ? ", or start with --no-verify" : ""),
};
