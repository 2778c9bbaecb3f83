import { startS3 } from "@fenced/servers";
import { windowSuite } from "./window-suite-test-support.js";

windowSuite(() => startS3());
