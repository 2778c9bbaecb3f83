import { describe, expect, it } from "vitest";
import { newLeaseValue } from "./lease-value.js";

describe("newLeaseValue", () => {
  it("hands out 128-bit hex values that never repeat, across many pool refills", () => {
    const values = Array.from({ length: 10_000 }, () => newLeaseValue());
    for (const v of values) expect(v).toMatch(/^[0-9a-f]{32}$/);
    expect(new Set(values).size).toBe(values.length);
    // No 16-byte window is handed out twice: no value shares a half with another (reused or shifted bytes would).
    expect(new Set(values.map((v) => v.slice(0, 16))).size).toBe(values.length);
    expect(new Set(values.map((v) => v.slice(16))).size).toBe(values.length);
  });
});
