import { startS3 } from "@fenced/servers";
import { skewSuite } from "./skew-suite-test-support.js";

skewSuite(() => startS3());
