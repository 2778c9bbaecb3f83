import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { LEASE_LOST_KINDS, NODE_FAILURE_REASONS } from "./errors.js";
import * as lock from "./index.js";

const README = readFileSync(new URL("../README.md", import.meta.url), "utf8");

/**
 * The first cell of every row of the table that follows the heading line `heading` (before the next
 * heading), without its backquotes: the names that table documents.
 */
function documented(heading: string): string[] {
  const lines = README.split("\n");
  const at = lines.indexOf(heading);
  if (at < 0) throw new Error(`the lock README has no heading ${JSON.stringify(heading)}`);
  const rows: string[] = [];
  for (const line of lines.slice(at + 1)) {
    if (line.startsWith("#") || (rows.length > 0 && !line.startsWith("|"))) break;
    if (line.startsWith("|")) rows.push(line);
  }
  // The header row and the |---| row name nothing.
  return rows.slice(2).map((row) => /^\|\s*`([^`]+)`\s*\|/.exec(row)?.[1] ?? `a row without a name: ${row}`);
}

/** The error classes the package exports: what a user can catch and tell apart with instanceof. */
function exportedErrors(): string[] {
  return Object.entries(lock)
    .filter(([, value]) => typeof value === "function" && value.prototype instanceof Error)
    .map(([name]) => name);
}

/** What the lock throws that @fenced/fence exports: bad input, checked by the fence's own rules. */
const FENCE_ERRORS = ["InvalidArgumentError"];

describe("the lock README documents every error the lock can produce", () => {
  it("its Errors table has a row for each error class the package exports, and for InvalidArgumentError (@fenced/fence's), and for no other", () => {
    expect(exportedErrors()).toContain("LeaseLostError");
    expect(documented("## Errors").sort()).toEqual([...exportedErrors(), ...FENCE_ERRORS].sort());
  });

  it("its LeaseLostError kinds are LEASE_LOST_KINDS, every one", () => {
    expect(documented("### `LeaseLostError` kinds").sort()).toEqual([...LEASE_LOST_KINDS].sort());
  });

  it("its node failure reasons are NODE_FAILURE_REASONS, every one", () => {
    expect(documented("### Node failure reasons").sort()).toEqual([...NODE_FAILURE_REASONS].sort());
  });
});
