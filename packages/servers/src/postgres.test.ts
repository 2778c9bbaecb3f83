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

/** A live process's state letter (R, S, T stopped …), undefined when it is gone or a zombie. */
function processState(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const state = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0];
    return state === "Z" ? undefined : state;
  } catch {
    return undefined;
  }
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

  it("with faults: pause stops the postmaster and its backends, resume, kill and restart keep the data", async () => {
    const saved = process.env.DATABASE_URL;
    // Asked for faults, it starts a server of its own even when DATABASE_URL names another.
    process.env.DATABASE_URL = "postgres://nobody@127.0.0.1:1/none";
    let server;
    try {
      server = await startPostgres({ faults: true });
    } finally {
      if (saved === undefined) delete process.env.DATABASE_URL;
      else process.env.DATABASE_URL = saved;
    }
    const { faults } = server;
    const open = async (): Promise<pg.Client> => {
      const client = new pg.Client({ connectionString: server.url, query_timeout: 1_000 });
      client.on("error", () => undefined);
      await client.connect();
      return client;
    };
    try {
      expect(server.source).toBe("local");
      expect(faults.running).toBe(true);
      const client = await open();
      await client.query("CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)");
      const backend = (await client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]?.pid ?? 0;
      const postmaster = processTable().get(backend)?.ppid ?? 0;
      expect(processTable().get(postmaster)?.cmdline).toContain(`port=${new URL(server.url).port}`);

      faults.pause();
      expect(faults.paused).toBe(true);
      // An open connection's backend is stopped too: no answer until resumed.
      const started = Date.now();
      await expect(client.query("SELECT 1")).rejects.toThrow();
      expect(Date.now() - started).toBeGreaterThanOrEqual(900);
      expect([processState(postmaster), processState(backend)]).toEqual(["T", "T"]);
      faults.resume();
      expect(faults.paused).toBe(false);
      const again = await open();
      expect((await again.query<{ v: number }>("SELECT v FROM kept")).rows).toEqual([{ v: 42 }]);

      await faults.kill();
      expect(faults.running).toBe(false);
      await expect(again.query("SELECT 1")).rejects.toThrow();
      expect([processState(postmaster), processState(backend)]).toEqual([undefined, undefined]);

      await faults.restart();
      expect(faults.running).toBe(true);
      const after = await open();
      expect((await after.query<{ v: number }>("SELECT v FROM kept")).rows).toEqual([{ v: 42 }]);
      // restart() of a running server kills it first.
      await faults.restart();
      await expect(after.query("SELECT 1")).rejects.toThrow();
      const last = await open();
      expect((await last.query<{ v: number }>("SELECT v FROM kept")).rows).toEqual([{ v: 42 }]);
      await Promise.all([client, again, after, last].map((c) => c.end().catch(() => undefined)));
    } finally {
      faults.resume();
      await server.stop();
    }
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
