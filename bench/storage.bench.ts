// What the stores keep, measured on real servers, JSON lines on stdout: the bytes a live key, a
// tombstone (a deleted key) and a resource occupy, in PostgreSQL and in S3. Tombstones and fences are
// never reclaimed, by design (PROTOCOL.md, "Postgres" → "Layout", and "S3" → "Tombstones"): these are
// the figures that cost, so that they can be re-measured.
//
// PostgreSQL: the store's two tables in a schema of their own. pg_table_size (heap, TOAST, free
// space and visibility maps) and pg_indexes_size of each, before and after N puts of new keys under
// one resource, N deletes of those keys, and N register()s of new resources; each step measured as
// written (dead row versions included) and after VACUUM FULL (what the rows need).
// S3: every object under the store's prefix (ListObjectsV2: count, body bytes, key bytes) by folder
// — manifests/, data/, fences/ — after N puts of small bodies (inlined in the manifest), N deletes,
// LARGE_N puts of bodies above the inline limit (a data object each), their deletes, and N register()s.
//
// STORAGE_N (default 3000), STORAGE_LARGE_N (default 100) and STORAGE_VALUE_BYTES (default 100) set the counts and size.
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { cpus, release, totalmem } from "node:os";
import { ListObjectsV2Command, type S3Client } from "@aws-sdk/client-s3";
import pg from "pg";
import { startPostgres, startS3 } from "@fenced/servers";
import { FencedPostgres } from "@fenced/store/postgres";
import { FencedS3 } from "@fenced/store/s3";
import { emit } from "./measure.js";

const N = Number(process.env.STORAGE_N ?? 3_000);
const LARGE_N = Number(process.env.STORAGE_LARGE_N ?? 100);
const VALUE_BYTES = Number(process.env.STORAGE_VALUE_BYTES ?? 100);
const LARGE_BYTES = 100 * 1024;
const CONCURRENCY = 8;
/** What a Lease from @fenced/lock presents as its holder. */
const HOLDER = "5f0c1e8a9b7d4c3e2f1a0b9c8d7e6f5a";
const SCHEMA = "storage_costs";
const PREFIX = "costs/";

const key = (i: number): string => `orders/${String(i).padStart(6, "0")}`;
const resource = (i: number): string => `accounts/${String(i).padStart(6, "0")}`;
const fence = { resource: "orders", token: 1n, holder: HOLDER };

/** A JSON object whose text is exactly VALUE_BYTES long. */
function value(i: number): Record<string, unknown> {
  const base = { id: i, customer: `c-${String(i).padStart(6, "0")}`, total: 12_345, currency: "EUR", note: "" };
  const pad = VALUE_BYTES - JSON.stringify(base).length;
  if (pad < 0) throw new Error(`STORAGE_VALUE_BYTES must be at least ${JSON.stringify(base).length}`);
  return { ...base, note: "x".repeat(pad) };
}

/** Runs op(0 … n-1), CONCURRENCY at a time. */
async function each(n: number, op: (i: number) => Promise<unknown>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < n) await op(next++);
    }),
  );
}

const perItem = (bytes: number, n: number): number => Math.round(bytes / n);

interface TableSize {
  readonly rows: number;
  /** Heap, TOAST, free space map and visibility map. */
  readonly table: number;
  readonly indexes: number;
  /** pg_total_relation_size: table + indexes. */
  readonly total: number;
}
type PgSizes = Record<"fence" | "records", TableSize>;

async function pgSizes(pool: pg.Pool): Promise<PgSizes> {
  const sizes = {} as Record<"fence" | "records", TableSize>;
  for (const table of ["fence", "records"] as const) {
    const { rows } = await pool.query<{ rows: string; table: string; indexes: string; total: string }>(
      `SELECT (SELECT count(*) FROM ${SCHEMA}.${table}) AS rows, pg_table_size($1) AS table,
              pg_indexes_size($1) AS indexes, pg_total_relation_size($1) AS total`,
      [`${SCHEMA}.${table}`],
    );
    const row = rows[0];
    if (row === undefined) throw new Error(`no size for ${table}`);
    sizes[table] = { rows: Number(row.rows), table: Number(row.table), indexes: Number(row.indexes), total: Number(row.total) };
  }
  return sizes;
}

/** The average stored size of a row (pg_column_size of the whole row: its header and columns, no index entry). */
async function avgRow(pool: pg.Pool, table: "fence" | "records", where = "true"): Promise<number> {
  const { rows } = await pool.query<{ avg: string | null }>(
    `SELECT avg(pg_column_size(t.*)) AS avg FROM ${SCHEMA}.${table} t WHERE ${where}`,
  );
  return Math.round(Number(rows[0]?.avg ?? Number.NaN));
}

async function postgres(): Promise<void> {
  const server = await startPostgres();
  const pool = new pg.Pool({ connectionString: server.url, max: CONCURRENCY + 2 });
  try {
    await pool.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`);
    const store = new FencedPostgres(pool, { schema: SCHEMA });
    await store.migrate();
    const { rows } = await pool.query<{ server_version: string }>("SHOW server_version");
    const context = {
      bench: "storage",
      store: "postgres",
      version: rows[0]?.server_version,
      source: server.source,
      n: N,
      valueBytes: VALUE_BYTES,
    };
    /** Sizes as written, then after VACUUM FULL (which rewrites each table and index with its live rows only). */
    const step = async (name: string): Promise<PgSizes> => {
      emit({ ...context, step: name, vacuumed: false, sizes: await pgSizes(pool) });
      await pool.query(`VACUUM FULL ${SCHEMA}.fence, ${SCHEMA}.records`);
      const vacuumed = await pgSizes(pool);
      emit({ ...context, step: name, vacuumed: true, sizes: vacuumed });
      return vacuumed;
    };

    const empty = await step("empty");
    await each(N, (i) => store.put(key(i), value(i), { fence }));
    const live = await step(`${N} puts of new keys, one resource`);
    const liveRow = await avgRow(pool, "records");
    await each(N, (i) => store.delete(key(i), { fence }));
    const deleted = await step(`${N} deletes of those keys`);
    const tombstoneRow = await avgRow(pool, "records", "value IS NULL");
    await each(N, (i) => store.register({ resource: resource(i), token: 1n, holder: HOLDER }));
    const registered = await step(`${N} register() of new resources`);
    const fenceRow = await avgRow(pool, "fence");

    const costs = [
      ["live key", perItem(live.records.total - empty.records.total, N), liveRow, `key ${key(0).length} B, value ${VALUE_BYTES} B of JSON`],
      ["tombstone", perItem(deleted.records.total - empty.records.total, N), tombstoneRow, "the live key's row, its value set to NULL"],
      [
        "resource",
        perItem(registered.fence.total - deleted.fence.total, N),
        fenceRow,
        `resource ${resource(0).length} B, holder ${HOLDER.length} B`,
      ],
    ] as const;
    for (const [item, bytes, row, what] of costs)
      emit({
        ...context,
        item,
        bytesPerItem: bytes,
        avgRowBytes: row,
        what,
        measure: "pg_total_relation_size after VACUUM FULL, per item",
      });
  } finally {
    await pool.end();
    await server.stop();
  }
}

interface Folder {
  objects: number;
  /** Body bytes (ListObjectsV2 Size). */
  bytes: number;
  /** Bytes of the objects' names. */
  keyBytes: number;
}

/** Every object under the store's prefix, by folder (manifests, data, fences). */
async function census(client: S3Client, bucket: string): Promise<Record<string, Folder>> {
  const folders: Record<string, Folder> = {};
  for (const folder of ["manifests", "data", "fences"]) folders[folder] = { objects: 0, bytes: 0, keyBytes: 0 };
  let token: string | undefined;
  do {
    const page = await client.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: PREFIX, ContinuationToken: token }));
    for (const o of page.Contents ?? []) {
      const name = o.Key ?? "";
      const folder = name.slice(PREFIX.length).split("/")[0] ?? "";
      const f = (folders[folder] ??= { objects: 0, bytes: 0, keyBytes: 0 });
      f.objects += 1;
      f.bytes += o.Size ?? 0;
      f.keyBytes += Buffer.byteLength(name);
    }
    token = page.NextContinuationToken;
  } while (token !== undefined);
  return folders;
}

const avgBytes = (f: Folder | undefined): number => (f === undefined || f.objects === 0 ? 0 : Math.round(f.bytes / f.objects));
const avgKey = (f: Folder | undefined): number => (f === undefined || f.objects === 0 ? 0 : Math.round(f.keyBytes / f.objects));

async function s3(): Promise<void> {
  const server = await startS3();
  try {
    const bucket = await server.createBucket();
    const client = server.client();
    const store = new FencedS3(client, { bucket, prefix: PREFIX });
    await store.verify();
    const version = server.source === "local" ? execFileSync("radosgw", ["--version"], { encoding: "utf8" }).trim() : undefined;
    const context = { bench: "storage", store: "s3", version, source: server.source, n: N, largeN: LARGE_N, valueBytes: VALUE_BYTES };
    const step = async (name: string): Promise<Record<string, Folder>> => {
      await store.flush(); // the deletions of replaced bodies, which writes leave in the background
      const folders = await census(client, bucket);
      emit({ ...context, step: name, folders });
      return folders;
    };

    const small = (i: number) => JSON.stringify(value(i));
    await each(N, (i) => store.put(key(i), small(i), { fence, contentType: "application/json" }));
    const live = await step(`${N} puts of ${VALUE_BYTES} B bodies (inlined), one resource`);
    await each(N, (i) => store.delete(key(i), { fence }));
    const deleted = await step(`${N} deletes of those keys`);
    const body = randomBytes(LARGE_BYTES);
    await each(LARGE_N, (i) => store.put(`large/${String(i).padStart(6, "0")}`, body, { fence }));
    const large = await step(`${LARGE_N} puts of ${LARGE_BYTES} B bodies (a data object each)`);
    await each(LARGE_N, (i) => store.delete(`large/${String(i).padStart(6, "0")}`, { fence }));
    const largeDeleted = await step(`${LARGE_N} deletes of those keys`);
    await each(N, (i) => store.register({ resource: resource(i), token: 1n, holder: HOLDER }));
    const registered = await step(`${N} register() of new resources`);

    // The large keys' share: what their puts (and then their deletes) added to the manifests folder.
    const largeManifest = perItem((large.manifests?.bytes ?? 0) - (deleted.manifests?.bytes ?? 0), LARGE_N);
    const largeTombstone = perItem((largeDeleted.manifests?.bytes ?? 0) - (deleted.manifests?.bytes ?? 0), LARGE_N);
    const dataObject = perItem(large.data?.bytes ?? 0, LARGE_N);
    const costs = [
      ["live key (body inlined)", avgBytes(live.manifests), 1, "one manifest: a JSON header line, then the body"],
      ["tombstone", avgBytes(deleted.manifests), 1, "the key's manifest, its body replaced by a tombstone"],
      [
        "live key (body in a data object)",
        largeManifest + dataObject,
        2,
        `a manifest of ${largeManifest} B naming a data object of ${dataObject} B (the body)`,
      ],
      [
        "tombstone of a key whose body was a data object",
        largeTombstone,
        1,
        `the data object is deleted with the delete: ${largeDeleted.data?.objects ?? 0} left`,
      ],
      [
        "resource",
        perItem((registered.fences?.bytes ?? 0) - (largeDeleted.fences?.bytes ?? 0), N),
        1,
        "one fence object (its name: the SHA-256 of the resource)",
      ],
    ] as const;
    for (const [item, bytes, objects, what] of costs)
      emit({ ...context, item, bytesPerItem: bytes, objectsPerItem: objects, what, measure: "ListObjectsV2 Size (body bytes), per item" });
    emit({ ...context, item: "object names", avgKeyBytes: { manifests: avgKey(registered.manifests), fences: avgKey(registered.fences) } });
  } finally {
    await server.stop();
  }
}

emit({
  bench: "storage",
  machine: {
    cpu: cpus()[0]?.model,
    cores: cpus().length,
    memoryGiB: Math.round(totalmem() / 1024 ** 3),
    kernel: release(),
    node: process.version,
  },
});
await postgres();
await s3();
