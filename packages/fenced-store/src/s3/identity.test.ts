import { startS3 } from "@fenced/servers";
import { identitySuite } from "./identity-suite-test-support.js";

identitySuite(() => startS3());
