import { S3Client } from "@aws-sdk/client-s3";
import { freePort, startS3 } from "@fenced/servers";
import { postgresSubject } from "./postgres-subject-test-support.js";
import { s3Subject } from "./s3-subject-test-support.js";
import { conformanceSuite } from "./suite-test-support.js";

// The conformance suite on the real servers: one line each.
conformanceSuite("FencedPostgres on PostgreSQL", postgresSubject);
conformanceSuite("FencedS3 on radosgw, bodies in data objects", async () => {
  const server = await startS3();
  // Nothing listens on a free port: every connection to it is refused.
  const port = await freePort();
  const refusing = () =>
    new S3Client({
      endpoint: `http://127.0.0.1:${port}`,
      region: server.region,
      credentials: { accessKeyId: server.accessKeyId, secretAccessKey: server.secretAccessKey },
      forcePathStyle: true,
    });
  return s3Subject(server, refusing, 0);
});
