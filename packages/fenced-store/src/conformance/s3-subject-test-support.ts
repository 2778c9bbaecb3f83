import type { S3Client } from "@aws-sdk/client-s3";
import type { S3Backend } from "../s3/backend-test-support.js";
import { FencedS3 } from "../s3/store.js";
import type { S3Body } from "../s3/body.js";
import type { S3Object } from "../s3/read.js";
import { aroundWire, contents, networkError } from "../s3/wire-test-support.js";
import type { Subject } from "./subject-test-support.js";

/**
 * FencedS3 over an S3 backend (radosgw, or the in-memory S3 under a profile): a bucket per open().
 * `inlineLimit` 0 keeps every body in a data object of its own, which a transfer carries over.
 */
export function s3Subject(backend: S3Backend, unreachableClient: () => S3Client, inlineLimit?: number): Subject<S3Body, S3Object> {
  const client = backend.client();
  return {
    async open() {
      const bucket = await backend.createBucket();
      const store = new FencedS3(client, { bucket, inlineLimit });
      const again = new FencedS3(backend.client(), { bucket, inlineLimit });
      return {
        store,
        again,
        // Once the bodies each write replaced are deleted (flush): what is left is what the writes keep.
        state: async () => {
          await Promise.all([store.flush(), again.flush()]);
          return contents(client, bucket);
        },
      };
    },
    unreachable() {
      const client = unreachableClient();
      let tries = 0;
      // Every request the client hands to its HTTP handler, the store's own conditional PUTs included.
      aroundWire(client, (_call, send) => (tries++, send()));
      return Promise.resolve({ store: new FencedS3(client, { bucket: "nowhere", timeoutMs: 2_000 }), tries: () => tries });
    },
    value: (text) => text,
    text: async (read) => {
      const chunks: Buffer[] = [];
      for await (const chunk of read.body) chunks.push(chunk as Buffer);
      return Buffer.concat(chunks).toString("utf8");
    },
    stop: () => backend.stop(),
  };
}

/** A client of the backend whose every request fails as a refused connection would, before it is sent. */
export function refusingClient(backend: S3Backend): S3Client {
  const client = backend.client();
  aroundWire(client, () => Promise.reject(networkError("ECONNREFUSED")));
  return client;
}
