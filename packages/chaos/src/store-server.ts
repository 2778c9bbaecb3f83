import { randomBytes } from "node:crypto";
import { startAzureBlob, startDynamo, startPostgres, startS3, type ServerFaults } from "@fenced/servers";
import type { StoreConnection } from "./counter-store.js";
import type { Backend, Mode } from "./history.js";

/**
 * One real store server per backend, shared by the configurations of a chaos run: each
 * configuration gets its own schema or bucket, so runs never see each other's data or ratchets.
 */
export interface StoreServer {
  readonly backend: Backend;
  /** Where the server listens; the workers' delay proxies forward here. */
  readonly host: string;
  readonly port: number;
  /**
   * Pause, kill and restart the server (radosgw for S3, dynalite for DynamoDB, azurite for Azure
   * Blob, which the nemesis only pauses), when it was started for faults.
   */
  readonly faults: ServerFaults | undefined;
  /** radosgw's clock, when it was started for faults (skew-s3). */
  readonly clock?: { setOffsetMs(ms: number): void };
  /** A fresh namespace (schema / bucket) for one configuration, connected directly. */
  namespace(mode: Mode): Promise<StoreConnection>;
  stop(): Promise<void>;
}

function hostPort(url: string, defaultPort: number): { host: string; port: number } {
  const parsed = new URL(url);
  return { host: parsed.hostname, port: parsed.port === "" ? defaultPort : Number(parsed.port) };
}

export interface StoreServerOptions {
  /**
   * Start a server of our own that the nemesis can pause and kill (pause-postgres, kill-postgres,
   * pause-s3, kill-s3, pause-dynamodb, kill-dynamodb, pause-azure-blob). A commit PostgreSQL acknowledged must survive a SIGKILL of every one of its
   * processes: it is started with synchronous_commit on (a commit is acknowledged once its WAL is
   * written) and fsync off. A process kill leaves the kernel's page cache alone, so written is enough;
   * only a crash of the machine would need the flush. synchronous_commit=off, the throwaway servers'
   * setting, would not do: it acknowledges a commit whose WAL may still be in the server's shared
   * memory, which dies with it.
   */
  readonly faults?: boolean;
}

export async function startStoreServer(backend: Backend, options: StoreServerOptions = {}): Promise<StoreServer> {
  const suffix = (): string => randomBytes(4).toString("hex");
  const faults = options.faults === true;
  if (backend === "postgres") {
    const pg = faults ? await startPostgres({ faults: true }) : await startPostgres();
    return {
      backend,
      ...hostPort(pg.url, 5432),
      faults: pg.faults,
      namespace: (mode) => Promise.resolve({ backend, url: pg.url, schema: `chaos_${mode}_${suffix()}` }),
      stop: () => pg.stop(),
    };
  }
  if (backend === "dynamodb") {
    // dynalite keeps its tables in LevelDB under a folder of its own: a SIGKILL leaves every write it
    // answered in the kernel's page cache, and its restart (on its port) reads them back.
    const dynamo = await startDynamo();
    return {
      backend,
      ...hostPort(dynamo.endpoint, 80),
      faults: faults ? dynamo.faults : undefined,
      namespace: async (mode) => ({
        backend,
        endpoint: dynamo.endpoint,
        region: dynamo.region,
        accessKeyId: dynamo.accessKeyId,
        secretAccessKey: dynamo.secretAccessKey,
        table: await dynamo.createTable(`chaos-${mode}-${suffix()}`),
      }),
      stop: () => dynamo.stop(),
    };
  }
  if (backend === "azure-blob") {
    // Paused, never killed: azurite saves its blobs' metadata every 5 s, so a SIGKILL would lose
    // writes it had answered (STORE_FAULT_KINDS has no kill for it).
    const azure = await startAzureBlob();
    return {
      backend,
      ...hostPort(azure.url, 80),
      faults: faults ? azure.faults : undefined,
      namespace: async (mode) => ({
        backend,
        url: azure.url,
        accountName: azure.accountName,
        accountKey: azure.accountKey,
        container: await azure.createContainer(`chaos-${mode}-${suffix()}`),
      }),
      stop: () => azure.stop(),
    };
  }
  // The Ceph cluster's monitor and OSD keep the objects; a kill is radosgw's, restarted on its port.
  const s3 = faults ? await startS3({ faults: true, clock: true }) : await startS3();
  return {
    backend,
    ...hostPort(s3.endpoint, s3.endpoint.startsWith("https:") ? 443 : 80),
    faults: s3.faults,
    ...(s3.clock === undefined ? {} : { clock: s3.clock }),
    namespace: async (mode) => ({
      backend,
      endpoint: s3.endpoint,
      region: s3.region,
      accessKeyId: s3.accessKeyId,
      secretAccessKey: s3.secretAccessKey,
      bucket: await s3.createBucket(`chaos-${mode}-${suffix()}`),
    }),
    stop: () => s3.stop(),
  };
}

/** The same connection, sent through a proxy listening on 127.0.0.1:port. */
export function throughProxy(connection: StoreConnection, port: number): StoreConnection {
  const rewrite = (url: string): string => {
    const parsed = new URL(url);
    parsed.hostname = "127.0.0.1";
    parsed.port = String(port);
    return parsed.toString();
  };
  // URL adds a trailing slash to a bare origin; the AWS clients would then sign a different path.
  const origin = (url: string): string => new URL(rewrite(url)).origin;
  switch (connection.backend) {
    case "postgres":
      return { ...connection, url: rewrite(connection.url) };
    case "s3":
    case "dynamodb":
      return { ...connection, endpoint: origin(connection.endpoint) };
    case "azure-blob":
      // The account's path stays: azurite serves accounts path-style.
      return { ...connection, url: rewrite(connection.url) };
  }
}
