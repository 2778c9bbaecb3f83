import type { StartBackend } from "./backend-test-support.js";
import { faultsSuite } from "./faults-suite-test-support.js";
import { fenceOrderSuite } from "./fence-order-suite-test-support.js";
import { identitySuite } from "./identity-suite-test-support.js";
import { latencySuite } from "./latency-suite-test-support.js";
import { propertySuite } from "./property-suite-test-support.js";
import { skewSuite } from "./skew-suite-test-support.js";
import { windowSuite } from "./window-suite-test-support.js";

/**
 * The suites that pin the write, against one backend: memory-radosgw.test.ts and memory-aws.test.ts
 * run them over the in-memory S3 with each profile's quirks, in the fast tier (they start no
 * server); each suite's own *.test.ts runs it against radosgw.
 */
export function writeSuites(start: StartBackend): void {
  propertySuite(start);
  windowSuite(start);
  identitySuite(start);
  faultsSuite(start);
  fenceOrderSuite(start);
  latencySuite(start);
  skewSuite(start);
}
