import { ListObjectsV2Command, type S3Client } from "@aws-sdk/client-s3";

// `@fenced/servers/s3-keys` loads nothing else of this package (no server, no process): tests over
// the in-memory S3 list keys with it too.

/** Every key under a prefix, sorted: how tests see what a bucket holds. */
export async function listKeys(client: S3Client, bucket: string, prefix = ""): Promise<string[]> {
  const keys: string[] = [];
  let token: string | undefined;
  do {
    const page = await client.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, ContinuationToken: token }));
    for (const o of page.Contents ?? []) if (o.Key !== undefined) keys.push(o.Key);
    token = page.NextContinuationToken;
  } while (token !== undefined);
  return keys.sort();
}
