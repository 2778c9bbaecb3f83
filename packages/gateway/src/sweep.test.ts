import { randomBytes } from "node:crypto";
import { HeadObjectCommand, PutObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FencedS3 } from "@fenced/store/s3";
import { startS3, type StartedS3 } from "@fenced/servers";
import { startCli } from "./cli-test-support.js";
import { loadSweepConfig } from "./config.js";
import { sweepCommand, type SweepIo } from "./sweep.js";

/**
 * `fenced-gateway sweep` as a child process, against a real radosgw: with the gateway's own flags and
 * variables (and no API keys), it deletes an orphaned data object — one no manifest can come to name
 * — and keeps what a manifest names; a dry run and a young orphan delete nothing.
 */
let s3: StartedS3;
let client: S3Client;
let bucket: string;
const PREFIX = "sweep/";
let orphan: string;

beforeAll(async () => {
  s3 = await startS3();
  client = s3.client();
  bucket = await s3.createBucket();
  const store = new FencedS3(client, { bucket, prefix: PREFIX });
  const fence = { resource: "docs", token: 1n };
  // Inline (small) and in a data object of its own (past the 64 KiB inline limit): both manifests must stay readable.
  await store.put("docs/small", Buffer.from("small"), { fence });
  await store.put("docs/big", Buffer.alloc(100_000, 7), { fence });
  // A create's data object on a key that has a manifest: no manifest can come to name it (layout.ts).
  orphan = `${PREFIX}data/docs/small/absent.${randomBytes(16).toString("hex")}`;
  await client.send(new PutObjectCommand({ Bucket: bucket, Key: orphan, Body: Buffer.alloc(1_000, 1) }));
});
afterAll(async () => {
  client?.destroy();
  await s3?.stop();
});

interface Report {
  readonly s3?: {
    readonly bucket: string;
    readonly dryRun: boolean;
    readonly minAgeMs: number;
    readonly deleted: { objects: number; bytes: number };
    readonly keptBecause: { named: { objects: number }; young: { objects: number } };
  };
  readonly postgres?: { readonly swept: false; readonly why: string };
}

/** The gateway's S3 settings: flags for the bucket, the variables for the credentials, as a deployment gives them. */
const s3Flags = (): string[] => ["--s3-bucket", bucket, "--s3-endpoint", s3.endpoint, "--s3-prefix", PREFIX];
const s3Env = (): Record<string, string> => ({
  FENCED_GATEWAY_S3_ACCESS_KEY_ID: s3.accessKeyId,
  FENCED_GATEWAY_S3_SECRET_ACCESS_KEY: s3.secretAccessKey,
  FENCED_GATEWAY_S3_REGION: s3.region,
  NODE_NO_WARNINGS: "1",
});

async function sweep(
  args: string[],
  env: Record<string, string> = s3Env(),
): Promise<{ code: number | null; report: Report; stderr: string }> {
  const child = startCli(["sweep", ...args], env);
  try {
    const code = await child.exited;
    // One JSON line on stdout, the report (startCli parses stdout line by line).
    expect(child.lines.length, child.stderr()).toBeLessThanOrEqual(1);
    const report: Report = child.lines[0] ?? {};
    return { code, report, stderr: child.stderr() };
  } finally {
    child.process.kill("SIGKILL");
  }
}

const exists = (key: string): Promise<boolean> =>
  client.send(new HeadObjectCommand({ Bucket: bucket, Key: key })).then(
    () => true,
    (err: { $metadata?: { httpStatusCode?: number } }) => {
      if (err.$metadata?.httpStatusCode === 404) return false;
      throw err;
    },
  );

describe("fenced-gateway sweep", () => {
  it("keeps a young orphan by default (a day); says PostgreSQL has nothing to sweep; progress on stderr", async () => {
    const run = await sweep([...s3Flags(), "--postgres", "postgres://gateway@db.invalid/fenced"]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.report.s3).toMatchObject({ bucket, dryRun: false, minAgeMs: 86_400_000, deleted: { objects: 0, bytes: 0 } });
    expect(run.report.s3?.keptBecause.young.objects).toBeGreaterThanOrEqual(2);
    expect(run.report.postgres?.swept).toBe(false);
    expect(run.report.postgres?.why).toMatch(/^nothing to sweep: .*one transaction/);
    expect(run.stderr).toMatch(/^fenced-gateway sweep: PostgreSQL: nothing to sweep/m);
    expect(run.stderr).toMatch(/^fenced-gateway sweep: S3: data: 1 page, 2 objects scanned/m);
    expect(await exists(orphan)).toBe(true);
  });

  it("a dry run counts the orphan and deletes nothing; then the sweep deletes it and keeps every named body", async () => {
    const dry = await sweep([...s3Flags(), "--dry-run", "--min-age", "0"]);
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.report.s3).toMatchObject({ dryRun: true, minAgeMs: 0, deleted: { objects: 1, bytes: 1_000 } });
    expect(dry.stderr).toMatch(/would delete 1 \(1000 B\)/);
    expect(await exists(orphan)).toBe(true);

    const run = await sweep([...s3Flags(), "--min-age", "0ms"]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.report.s3).toMatchObject({ dryRun: false, deleted: { objects: 1, bytes: 1_000 }, keptBecause: { named: { objects: 1 } } });
    expect(await exists(orphan)).toBe(false);
    const store = new FencedS3(client, { bucket, prefix: PREFIX });
    expect((await store.getBytes("docs/big"))?.body.equals(Buffer.alloc(100_000, 7))).toBe(true);
    expect((await store.getBytes("docs/small"))?.body.toString()).toBe("small");
  });

  it("one line and a non-zero exit on a failure; PostgreSQL alone has nothing to sweep", async () => {
    const [missing, badAge, none, postgresOnly] = await Promise.all([
      sweep(["--s3-bucket", "no-such-bucket-here", "--s3-endpoint", s3.endpoint]),
      sweep([...s3Flags(), "--min-age", "a week"]),
      sweep([], { NODE_NO_WARNINGS: "1" }),
      sweep(["--postgres", "postgres://gateway@db.invalid/fenced"], { NODE_NO_WARNINGS: "1" }),
    ]);
    const oneLine = (run: { stderr: string }): string => {
      const lines = run.stderr.trimEnd().split("\n");
      expect(lines, run.stderr).toHaveLength(1);
      return lines[0] ?? "";
    };
    expect(missing.code).toBe(1);
    expect(oneLine(missing)).toMatch(/^fenced-gateway sweep: s3 is not set up \(no-such-bucket\)/);
    expect(badAge.code).toBe(2);
    expect(oneLine(badAge)).toMatch(/^fenced-gateway sweep: invalid configuration: --min-age: "a week" is not a duration/);
    expect(none.code).toBe(2);
    expect(oneLine(none)).toMatch(/^fenced-gateway sweep: no store is configured/);
    expect(postgresOnly.code).toBe(0);
    expect(oneLine(postgresOnly)).toMatch(/^fenced-gateway sweep: PostgreSQL: nothing to sweep/);
    expect(Object.keys(postgresOnly.report)).toEqual(["postgres"]);
    expect(postgresOnly.report.postgres?.why).toMatch(/^nothing to sweep/);
  });

  it("a signal interrupts it: exit 1, one line, no report", async () => {
    const config = loadSweepConfig(
      { s3Bucket: bucket, s3Endpoint: s3.endpoint, s3Prefix: PREFIX },
      { ...s3Env(), FENCED_GATEWAY_S3_REGION: s3.region },
    );
    const listeners = process.listenerCount("SIGWINCH");
    const out: string[] = [];
    const err: string[] = [];
    const io: SweepIo = { stdout: (t) => void out.push(t), stderr: (t) => void err.push(t), signals: ["SIGWINCH"] };
    // The listing request is in flight when the signal arrives (sweepCommand is inside it once it returns its promise).
    // SIGWINCH stands in for SIGINT and SIGTERM: emitted here, no other listener of the test process acts on it.
    const running = sweepCommand(config, { minAgeMs: 0, dryRun: true }, io);
    process.emit("SIGWINCH", "SIGWINCH");
    expect(await running).toBe(1);
    expect(err).toEqual([expect.stringMatching(/^fenced-gateway sweep: interrupted by SIGWINCH: what it deleted stays deleted/)]);
    expect(out).toEqual([]);
    expect(process.listenerCount("SIGWINCH")).toBe(listeners);
  });
});
