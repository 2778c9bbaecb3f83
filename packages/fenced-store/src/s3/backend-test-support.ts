import { randomBytes } from "node:crypto";
import type { S3Client } from "@aws-sdk/client-s3";
import { awsProfile, MemoryS3, radosgwProfile, type QuirkProfile } from "./memory-s3-test-support.js";

/**
 * What a suite of the S3 write runs against: radosgw (StartedS3, from @fenced/servers: the server
 * tier) or the in-memory S3 with a backend's quirks (memoryBackend: the fast tier too). A suite is a
 * function of how to start its backend (`*-suite-test-support.ts`); its `*.test.ts` runs it against
 * radosgw, memory-radosgw.test.ts and memory-aws.test.ts against each profile (one file each, so that
 * the fast tier runs them side by side). The in-memory server stands in only where
 * memory-s3.contract.test.ts runs the same cases against radosgw.
 */
export interface S3Backend {
  /** A new client (each call: tests attach their own middleware, or pause one "process"). */
  client(): S3Client;
  /** A fresh bucket's name. */
  createBucket(): Promise<string>;
  stop(): Promise<void>;
}

export type StartBackend = () => Promise<S3Backend>;

/** The in-memory S3 with a backend's quirks: every client of it sees the same buckets. */
function memoryBackend(profile: QuirkProfile): S3Backend {
  const server = new MemoryS3(profile);
  let clients = 0;
  return {
    client: () => server.client(`client-${++clients}`),
    createBucket: () => Promise.resolve(server.createBucket(`bucket-${randomBytes(6).toString("hex")}`)),
    stop: () => Promise.resolve(),
  };
}

/** The in-memory S3 with radosgw's quirks (as memory-s3.contract.test.ts checks them against radosgw). */
export const memoryRadosgw: StartBackend = () => Promise.resolve(memoryBackend(radosgwProfile));

/** The in-memory S3 with AWS's quirks, as AWS documents them. */
export const memoryAws: StartBackend = () => Promise.resolve(memoryBackend(awsProfile));
