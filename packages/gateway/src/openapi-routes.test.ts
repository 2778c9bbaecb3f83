// The API document's problem lists against the code: every problem kind a route module names is
// documented on at least one operation of the paths it serves.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { openApiDocument } from "./openapi/document.js";
import { problemName } from "./openapi/components.js";
import { HTTP_METHODS } from "./openapi/types.js";
import { resolve } from "./openapi-test-support.js";
import { PROBLEM_KINDS, type ProblemKind } from "./problems/kinds.js";

const document = openApiDocument();

/** The problem kinds the document lists on every operation under `prefix`, and on each of them. */
function documented(prefix: string): { union: Set<ProblemKind>; operations: number } {
  const byRef = new Map(PROBLEM_KINDS.map((k) => [`#/components/schemas/${problemName(k)}`, k]));
  const union = new Set<ProblemKind>();
  let operations = 0;
  for (const [path, item] of Object.entries(document.paths)) {
    if (!path.startsWith(prefix)) continue;
    for (const method of HTTP_METHODS) {
      const op = (item as Record<string, { responses?: Record<string, unknown> }>)[method];
      if (op?.responses === undefined) continue;
      operations++;
      // Every $ref under the operation's responses (a shared one, components.responses, followed) that names a problem schema.
      JSON.stringify(
        Object.values(op.responses).map((r) => resolve(document, r)),
        (key, value: unknown) => {
          if (key === "$ref" && typeof value === "string" && byRef.has(value)) union.add(byRef.get(value) as ProblemKind);
          return value;
        },
      );
    }
  }
  return { union, operations };
}

/**
 * The kinds a source module names in `new HttpProblem("…")`. Not `method` (methodNotAllowed): a 405
 * answers a method that is no operation of the path, so no operation lists it.
 */
function named(module: string): Set<ProblemKind> {
  const source = readFileSync(new URL(module, import.meta.url), "utf8");
  const kinds = new Set([...source.matchAll(/HttpProblem\("([A-Za-z]+)"/g)].map((m) => m[1] as ProblemKind));
  for (const kind of kinds) expect(PROBLEM_KINDS, `${module} names ${kind}`).toContain(kind);
  return kinds;
}

describe("the document lists what each route family can answer", () => {
  const families = [
    // The lease routes, and the stores' registration with fence-on-acquire.
    { prefix: "/v1/leases", modules: ["./routes/leases.ts", "./auth/lease-id.ts"], stores: true },
    // The record and object routes share the write checks (access.ts) and the fence credentials.
    { prefix: "/v1/records", modules: ["./routes/records.ts", "./routes/access.ts", "./auth/credentials.ts"], stores: true },
    { prefix: "/v1/objects", modules: ["./routes/objects.ts", "./routes/access.ts", "./auth/credentials.ts"], stores: true },
  ] as const;
  for (const { prefix, modules, stores } of families) {
    it(prefix, () => {
      const { union, operations } = documented(prefix);
      expect(operations).toBeGreaterThan(0);
      const expected = new Set<ProblemKind>(["unauthorized", "forbidden", "internal", "unavailable"]);
      for (const module of modules) for (const kind of named(module)) expected.add(kind);
      // What a store's typed errors and a backend's own errors are answered with (problems/problem.ts).
      if (stores)
        for (const kind of ["backendMisconfigured", "backendError", "corruptState", "outcomeUnknown"] as const) expected.add(kind);
      const missing = [...expected].filter((k) => !union.has(k));
      expect(missing, `${prefix}: kinds the code answers that no operation documents`).toEqual([]);
    });
  }
});
