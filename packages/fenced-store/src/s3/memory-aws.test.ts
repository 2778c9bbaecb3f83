import { describe } from "vitest";
import { memoryAws } from "./backend-test-support.js";
import { writeSuites } from "./write-suites-test-support.js";

describe("in-memory S3 with AWS's quirks", () => writeSuites(memoryAws));
