import { S3Client } from "@aws-sdk/client-s3";
import { freePort, startS3 } from "@fenced/servers";
import { postgresSubject } from "./postgres-subject-test-support.js";
import { s3Subject } from "./s3-subject-test-support.js";
import { dynamoSubject } from "./dynamodb-subject-test-support.js";
import { azureBlobSubject } from "./azure-blob-subject-test-support.js";
import { conformanceSuite } from "./suite-test-support.js";

// The conformance suite on the real servers: one line each.
conformanceSuite("FencedPostgres on PostgreSQL", postgresSubject);
/** FencedS3 on radosgw; a client of a port nothing listens on: every connection to it is refused. */
async function radosgw(inlineLimit?: number) {
  const server = await startS3();
  const port = await freePort();
  const refusing = () =>
    new S3Client({
      endpoint: `http://127.0.0.1:${port}`,
      region: server.region,
      credentials: { accessKeyId: server.accessKeyId, secretAccessKey: server.secretAccessKey },
      forcePathStyle: true,
    });
  return s3Subject(server, refusing, inlineLimit);
}

conformanceSuite("FencedS3 on radosgw, bodies inline", () => radosgw());
conformanceSuite("FencedS3 on radosgw, bodies in data objects", () => radosgw(0));

conformanceSuite("FencedDynamo on dynalite", dynamoSubject);

conformanceSuite("FencedAzureBlob on azurite", azureBlobSubject);
