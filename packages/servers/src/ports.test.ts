import { spawn } from "node:child_process";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ephemeralRange, freePort, reservedRange } from "./ports.js";

const DIR = join(tmpdir(), "fenced-ports");

/** A process that is alive until killed, and one that has exited: the holders a reservation file can name. */
async function processes(): Promise<{ live: number; dead: number; stop: () => void }> {
  const live = spawn("sleep", ["60"], { stdio: "ignore" });
  const gone = spawn("true", { stdio: "ignore" });
  await new Promise((resolve) => gone.once("exit", resolve));
  if (live.pid === undefined || gone.pid === undefined) throw new Error("could not spawn");
  return { live: live.pid, dead: gone.pid, stop: () => live.kill("SIGKILL") };
}

describe("freePort", () => {
  it("picks outside the kernel's ephemeral range, where no listen(0) or outgoing connection of any process can take a killed server's port", async () => {
    const ephemeral = ephemeralRange();
    for (let i = 0; i < 20; i++) {
      const port = await freePort();
      expect(port < ephemeral.lo || port > ephemeral.hi, `${port} in ${ephemeral.lo}-${ephemeral.hi}`).toBe(true);
      // Reserved for this process: its file names us.
      expect(readFileSync(join(DIR, String(port)), "utf8")).toBe(String(process.pid));
    }
  });

  it("never hands out a port a live process has reserved; takes over one whose process is gone", async () => {
    // A narrow range of our own, below where freePort picks for anyone else.
    const base = 14_000 + (process.pid % 400) * 2;
    const range = { lo: base, hi: base + 1 };
    const { live, dead, stop } = await processes();
    try {
      mkdirSync(DIR, { recursive: true });
      writeFileSync(join(DIR, String(base)), String(live));
      writeFileSync(join(DIR, String(base + 1)), String(dead));
      // The live process's port is skipped every time; the dead one's is taken over, once.
      expect(await freePort(range)).toBe(base + 1);
      expect(readFileSync(join(DIR, String(base + 1)), "utf8")).toBe(String(process.pid));
      await expect(freePort(range)).rejects.toThrow(`no free port in ${base}-${base + 1}`);
    } finally {
      stop();
      rmSync(join(DIR, String(base)), { force: true });
    }
  });

  it("chooses the room below the ephemeral range, else above it", () => {
    expect(reservedRange({ lo: 32_768, hi: 60_999 })).toEqual({ lo: 15_000, hi: 32_767 });
    expect(reservedRange({ lo: 15_500, hi: 60_999 })).toEqual({ lo: 61_000, hi: 65_535 });
    expect(() => reservedRange({ lo: 1_024, hi: 65_000 })).toThrow(/no room/);
  });
});
