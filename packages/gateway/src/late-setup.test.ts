import { performance } from "node:perf_hooks";
import pg from "pg";
import { startPostgres, type StartedPostgres } from "@fenced/servers";
import { FencedPostgres } from "@fenced/store/postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startCli, type Child } from "./cli-test-support.js";
import type { HealthReport } from "./app.js";
import { httpClient, KEYS, writeHeaders, type HttpClient } from "./test-support.js";

/**
 * `--no-start-checks` with PostgreSQL's database created after the gateway started: /readyz says 503
 * and why until the store is set up, and turns ready by itself; the tables are created from the
 * background re-check only with migrateInBackground.
 */
const ENV = {
  FENCED_GATEWAY_API_KEYS: JSON.stringify([{ id: "admin", key: KEYS.admin, resources: [""], keys: [""], trustedLockClient: true }]),
  FENCED_GATEWAY_LOG_LEVEL: "info",
  NODE_NO_WARNINGS: "1",
};
/** The background re-check looks every 5 s (ops/recheck.ts): a few of its rounds. */
const SETTLES_MS = 30_000;

let postgres: StartedPostgres;
let admin: pg.Client;
beforeAll(async () => {
  postgres = await startPostgres();
  admin = new pg.Client({ connectionString: postgres.url });
  await admin.connect();
}, 120_000);
afterAll(async () => {
  await admin?.end();
  await postgres?.stop();
});

async function until<T>(ask: () => Promise<T>, done: (t: T) => boolean, ms = SETTLES_MS): Promise<T> {
  const deadline = performance.now() + ms;
  for (;;) {
    const answer = await ask();
    if (done(answer)) return answer;
    if (performance.now() > deadline) throw new Error(`not so within ${ms} ms: ${JSON.stringify(answer)}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

async function started(database: string, env: Record<string, string>): Promise<{ child: Child; api: HttpClient; adm: HttpClient }> {
  const url = new URL(postgres.url);
  url.pathname = `/${database}`;
  const child = startCli(["--port", "0", "--admin-port", "0", "--no-start-checks", "--postgres", url.toString()], { ...ENV, ...env });
  const listening = await child.waitFor("listening");
  return { child, api: httpClient(Number(listening.port)), adm: httpClient((listening.admin as { port: number }).port) };
}

const readiness = async (c: HttpClient): Promise<{ status: number; report: HealthReport }> => {
  const res = await c.send({ method: "GET", path: "/readyz" });
  return { status: res.status, report: res.json<HealthReport>() };
};

const write = (c: HttpClient, token: bigint) =>
  c.send({
    method: "PUT",
    path: "/v1/records/late/k",
    headers: { ...writeHeaders(KEYS.admin, token), "content-type": "application/json" },
    body: "1",
  });

describe("a database created after the start (--no-start-checks)", () => {
  it("not ready while it is missing, then while its tables are; ready once someone migrates them", async () => {
    const { child, api, adm } = await started("late_read_only", {});
    try {
      const missing = await readiness(adm);
      expect(missing.status).toBe(503);
      expect(missing.report.checks.postgres).toMatchObject({ state: "misconfigured", problem: "no-such-database", code: "3D000" });
      await admin.query("CREATE DATABASE late_read_only");
      // The database answers now, without the tables: still not ready, and the re-check does not create them.
      await until(
        () => readiness(adm),
        (r) => r.report.checks.postgres?.problem === "not-migrated",
      );
      // The re-check saw it too, and says who must act.
      await child.waitFor(
        "PostgreSQL's tables are missing: migrate them (a gateway started with migrate, or migrateInBackground); looking again",
      );
      expect((await readiness(adm)).status).toBe(503);
      expect((await write(api, 1n)).status).toBe(503);
      const url = new URL(postgres.url);
      url.pathname = "/late_read_only";
      const pool = new pg.Pool({ connectionString: url.toString() });
      try {
        await new FencedPostgres(pool).migrate();
      } finally {
        await pool.end();
      }
      const ready = await until(
        () => readiness(adm),
        (r) => r.status === 200,
      );
      expect(ready.report.status).toBe("ok");
      expect((await write(api, 2n)).status).toBe(200);
    } finally {
      api.close();
      adm.close();
      child.process.kill("SIGKILL");
    }
  }, 120_000);

  it("with migrateInBackground the re-check creates the tables once the database answers", async () => {
    const { child, api, adm } = await started("late_migrated", { FENCED_GATEWAY_MIGRATE_IN_BACKGROUND: "true" });
    try {
      expect((await readiness(adm)).status).toBe(503);
      // PostgreSQL's own answer (3D000), passed on as the backend's error.
      expect((await write(api, 1n)).status).toBe(502);
      await admin.query("CREATE DATABASE late_migrated");
      await until(
        () => readiness(adm),
        (r) => r.status === 200,
      );
      expect((await write(api, 2n)).status).toBe(200);
      expect(child.lines.some((l) => String(l.msg).startsWith("migrated the PostgreSQL tables from the background check"))).toBe(true);
    } finally {
      api.close();
      adm.close();
      child.process.kill("SIGKILL");
    }
  }, 120_000);
});
