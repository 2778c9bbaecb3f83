import { startS3 } from "@fenced/servers";
import { propertySuite } from "./property-suite-test-support.js";

propertySuite(() => startS3());
