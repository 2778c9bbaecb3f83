import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const run = promisify(execFile);
/** The repository's root, where tsx (a dev dependency) resolves from. */
const ROOT = fileURLToPath(new URL("../../..", import.meta.url));

/**
 * A process in which nothing wakes the event loop but one timer far off (KEEP_MS): the round is over,
 * and its silent node's `timeout` report (notBefore, unref'd) is all that is left to run. A report
 * that waited for something else to wake the loop would come only then.
 */
const KEEP_MS = 5_000;
const SCRIPT = (quorum: string): string => `
import { fanOut } from ${JSON.stringify(quorum)};
const started = performance.now();
const keep = setTimeout(() => console.log("never told"), ${KEEP_MS});
void fanOut(2, 20, {
  send: (node) => (node === 0 ? Promise.resolve("OK") : new Promise(() => undefined)),
  decided: () => true,
  observe: (node) => node === 1 && (console.log(String(performance.now() - started)), clearTimeout(keep)),
});
`;

describe("notBefore in a process with nothing else to do", () => {
  it("tells a silent node timeout when its time comes, though nothing else would wake the event loop", { timeout: 60_000 }, async () => {
    const quorum = new URL("./quorum.ts", import.meta.url).href;
    const { stdout } = await run(
      process.execPath,
      ["--conditions=source", "--import", "tsx", "--input-type=module", "-e", SCRIPT(quorum)],
      {
        cwd: ROOT,
      },
    );
    expect(stdout.trim()).not.toBe("never told");
    const toldMs = Number(stdout.trim());
    expect(toldMs).toBeGreaterThanOrEqual(20);
    // Told on the turn its wait ended: far below the one timer that could otherwise wake the loop.
    expect(toldMs).toBeLessThan(KEEP_MS / 2);
  });
});
