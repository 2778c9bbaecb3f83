import { describe, expect, it } from "vitest";
import { EVERY_DRIVER } from "./drivers.js";
import { STORES } from "./registry.js";

describe("store drivers", () => {
  it("each registration loads the driver createGateway serves it with, and every store has one", async () => {
    // The bin serves a store with what its registration's load() resolves to, createGateway with
    // EVERY_DRIVER: one driver per store, whichever way the gateway was made.
    expect(Object.keys(EVERY_DRIVER).sort()).toEqual(STORES.map((store) => store.name).sort());
    for (const store of STORES) expect(await store.load(), store.name).toBe(EVERY_DRIVER[store.name as keyof typeof EVERY_DRIVER]);
  });
});
