import { describe } from "vitest";
import { MEMORY_BACKENDS } from "./backend-test-support.js";
import { faultsSuite } from "./faults-suite-test-support.js";
import { fenceOrderSuite } from "./fence-order-suite-test-support.js";
import { identitySuite } from "./identity-suite-test-support.js";
import { latencySuite } from "./latency-suite-test-support.js";
import { propertySuite } from "./property-suite-test-support.js";
import { windowSuite } from "./window-suite-test-support.js";

// The suites that pin the write, against the in-memory S3 with each backend's quirks: in the fast
// tier (they start no server), as well as against radosgw in their own *.test.ts files.
for (const [name, start] of MEMORY_BACKENDS) {
  describe(`in-memory S3 with ${name}'s quirks`, () => {
    propertySuite(start);
    windowSuite(start);
    identitySuite(start);
    faultsSuite(start);
    fenceOrderSuite(start);
    latencySuite(start);
  });
}
