import { startS3 } from "@fenced/servers";
import { fenceOrderSuite } from "./fence-order-suite-test-support.js";

fenceOrderSuite(() => startS3());
