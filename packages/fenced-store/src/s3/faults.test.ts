import { startS3 } from "@fenced/servers";
import { faultsSuite } from "./faults-suite-test-support.js";

faultsSuite(() => startS3());
