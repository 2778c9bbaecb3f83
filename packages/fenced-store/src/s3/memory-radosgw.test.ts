import { describe } from "vitest";
import { memoryRadosgw } from "./backend-test-support.js";
import { writeSuites } from "./write-suites-test-support.js";

describe("in-memory S3 with radosgw's quirks", () => writeSuites(memoryRadosgw));
