import { existsSync, readFileSync, readdirSync } from "node:fs";
import pg from "pg";
import { describe, expect, it } from "vitest";
import { findPostgresBinaries, startPostgres } from "./postgres.js";

/** pid → ppid and command line of every process we can see; how "nothing left behind" is checked. */
function processTable(): Map<number, { ppid: number; cmdline: string }> {
  const table = new Map<number, { ppid: number; cmdline: string }>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      // The command name may contain spaces and parentheses: fields resume after the last ')'.
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8").replaceAll("\0", " ");
      table.set(Number(entry), { ppid, cmdline });
    } catch {
      // exited while we looked
    }
  }
  return table;
}

describe("startPostgres", () => {
  it("starts a server that answers SELECT 1, and stop() leaves no process and no files", async () => {
    const started = Date.now();
    const server = await startPostgres();
    const startMs = Date.now() - started;
    const client = new pg.Client({ connectionString: server.url });
    await client.connect();
    const { rows } = await client.query<{ one: number }>("SELECT 1 AS one");
    expect(rows).toEqual([{ one: 1 }]);
    const { rows: version } = await client.query<{ server_version_num: string }>("SHOW server_version_num");
    expect(Number(version[0]?.server_version_num)).toBeGreaterThanOrEqual(130000);

    if (server.source !== "local") {
      await client.end();
      await server.stop();
      return;
    }
    expect(startMs).toBeLessThan(10_000);
    const { rows: dirRows } = await client.query<{ data_directory: string }>("SHOW data_directory");
    const dataDir = dirRows[0]?.data_directory ?? "";
    expect(existsSync(dataDir)).toBe(true);
    // The server listens on loopback only.
    const { rows: listen } = await client.query<{ listen_addresses: string }>("SHOW listen_addresses");
    expect(listen[0]?.listen_addresses).toBe("127.0.0.1");

    const before = processTable();
    const postmaster = [...before].find(([, p]) => p.cmdline.includes(dataDir))?.[0];
    expect(postmaster).toBeDefined();
    const family = [...before].filter(([pid, p]) => pid === postmaster || p.ppid === postmaster).map(([pid]) => pid);
    expect(family.length).toBeGreaterThan(1); // the postmaster and its auxiliary processes
    await client.end();

    await server.stop();
    await server.stop(); // idempotent
    const after = processTable();
    expect(family.filter((pid) => after.has(pid))).toEqual([]);
    expect(existsSync(dataDir)).toBe(false);
    const late = new pg.Client({ connectionString: server.url, connectionTimeoutMillis: 1_000 });
    late.on("error", () => undefined);
    await expect(late.connect()).rejects.toThrow();
  });

  it("says what to install when the binaries are missing", () => {
    const path = process.env.PATH;
    process.env.PATH = "";
    try {
      expect(() => findPostgresBinaries(["/nonexistent"])).toThrow(/apt-get install postgresql/);
    } finally {
      process.env.PATH = path;
    }
  });
});
