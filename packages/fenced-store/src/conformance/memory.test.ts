import { memoryAws, memoryRadosgw } from "../s3/backend-test-support.js";
import { referenceSubject } from "./reference-store-test-support.js";
import { refusingClient, s3Subject } from "./s3-subject-test-support.js";
import { conformanceSuite } from "./suite-test-support.js";

// The conformance suite on the stores that need no server: one line each.
conformanceSuite("FencedS3 on the in-memory S3 with radosgw's quirks, bodies inline", async () => {
  const backend = await memoryRadosgw();
  return s3Subject(backend, () => refusingClient(backend));
});
conformanceSuite("FencedS3 on the in-memory S3 with AWS's quirks, bodies in data objects", async () => {
  const backend = await memoryAws();
  return s3Subject(backend, () => refusingClient(backend), 0);
});
conformanceSuite("the reference store (ARCHITECTURE.md, Add a store)", referenceSubject);
