import { startS3 } from "@fenced/servers";
import { latencySuite } from "./latency-suite-test-support.js";

latencySuite(() => startS3());
