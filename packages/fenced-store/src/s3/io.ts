import type { Readable } from "node:stream";
import type { S3Client } from "@aws-sdk/client-s3";
import type { Deadline } from "../deadline.js";
import { StoreIo, type Bodies } from "../cas/io.js";
import { AttemptBodies } from "./bodies.js";
import { ConditionalObjects } from "./conditional.js";
import { Deletions } from "./deletions.js";
import { s3Failures } from "./failures.js";
import type { ResolvedOptions } from "./options.js";

/**
 * What one FencedS3 shares between its calls: the algorithm's (../cas/io.ts) over the S3 adapter,
 * and the data objects it has beside it — each write's (bodies.ts) and the background deletions of
 * replaced ones, batched, which flush() sends at once.
 */
export class S3Io extends StoreIo {
  declare readonly objects: ConditionalObjects;
  declare readonly options: ResolvedOptions;
  /** The background deletions of replaced bodies, batched; flush() sends them at once. */
  readonly deletions: Deletions;

  constructor(
    readonly client: S3Client,
    options: ResolvedOptions,
  ) {
    super(new ConditionalObjects(client, options.bucket, options.timeoutMs), options, s3Failures(options.bucket));
    this.deletions = new Deletions(client, options.bucket, options.timeoutMs);
  }

  override attemptBodies(
    key: string,
    payload: Buffer | Readable,
    length: number | undefined,
    contentType: string | undefined,
    deadline: Deadline,
  ): Bodies {
    return new AttemptBodies(this, key, payload, length, contentType, deadline);
  }

  override retireData(dataKey: string): Promise<void> {
    return this.deletions.delete(dataKey);
  }

  override async flush(): Promise<void> {
    await this.deletions.urgently(() => super.flush());
  }
}
