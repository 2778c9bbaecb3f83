// Azure Blob Storage for tests: azurite's blob service (npm), on a free loopback port, its blobs on
// disk in a scratch folder so that a restart keeps them; never any telemetry. What it has, as tried
// here: If-None-Match: *, If-Match, and blob index tags compared in a write's own condition
// (x-ms-if-tags), each answering 412 ConditionNotMet when it fails.
// A limit of the emulator, not of Azure: azurite keeps its blobs' metadata in memory and saves it
// every 5 s (LokiJS's autosave), so a SIGKILL loses the writes of the last seconds, answered or not.
// A test that kills it and counts on a write waits for `saved()` first.
import { statSync } from "node:fs";
import { get } from "node:http";
import { createRequire } from "node:module";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { BlobServiceClient, StorageSharedKeyCredential } from "@azure/storage-blob";
import { startEmulator } from "./emulator.js";
import { waitFor } from "./processes.js";
import type { ServerFaults } from "./faults.js";

export interface StartedAzureBlob {
  /** The account's URL: http://127.0.0.1:port/devstoreaccount1 (azurite serves accounts path-style). */
  readonly url: string;
  readonly accountName: string;
  readonly accountKey: string;
  /** The account as a connection string (AZURE_STORAGE_CONNECTION_STRING): BlobServiceClient.fromConnectionString() takes it. */
  readonly connectionString: string;
  /** A new client for this server's account. */
  client(): BlobServiceClient;
  /** Creates a container (a fresh unique name unless given; 3 to 63 characters) and returns its name. */
  createContainer(name?: string): Promise<string>;
  /**
   * Resolves once azurite has saved to disk every write answered before the call (see the header),
   * right after that save: the next is about 5 s away. Call it after a write: with nothing unsaved,
   * azurite saves nothing, and it throws after 15 s.
   */
  saved(): Promise<void>;
  /**
   * Resolves once azurite has answered two requests in turn, each on a connection of its own. Call
   * it after `faults.resume()`, before a request on a client used before the pause. The Azure SDK's
   * clients in a process share one pool of keep-alive connections, which it keeps open however long
   * they idle; azurite closes one idle for 6 s (Node's default 5 s and its 1 s buffer: azurite does
   * not read its own --blobKeepAliveTimeout flag). A pause lets those timers run out, and on resume
   * azurite closes the connections just as a request may be sent on one, which is then reset
   * (ECONNRESET). Azurite runs its overdue timers in the turn of its loop after the one it resumes
   * in, at the latest: by its second answer here, those connections are closed.
   */
  settled(): Promise<void>;
  /** SIGSTOP, SIGCONT, SIGKILL and a restart (on the same port, with the blobs it had saved) of the azurite process. */
  readonly faults: ServerFaults;
  /** Stops it and removes its files; idempotent. */
  stop(): Promise<void>;
}

const require = createRequire(import.meta.url);

/** azurite's well-known development account, the one it serves unless told otherwise. */
const ACCOUNT = "devstoreaccount1";
const ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/** azurite's metadata files in its folder, each saved every AUTOSAVE_MS if changed: its blobs' records, then where their bytes are. */
const DB_FILES = ["__azurite_db_blob__.json", "__azurite_db_blob_extent__.json"];
const AUTOSAVE_MS = 5_000;

/** How long azurite may take to answer after it is spawned: 3 to 5 s here, alone. */
const START_TIMEOUT_MS = 60_000;

export async function startAzureBlob(): Promise<StartedAzureBlob> {
  const running = await startEmulator({
    name: "azurite",
    entry: require.resolve("azurite/dist/src/blob/main.js"),
    // --disableTelemetry: it would otherwise send usage data out. --skipApiVersionCheck: the SDK may
    // be newer than the emulator, which would refuse its x-ms-version.
    args: (port, dir) => [
      "--blobHost",
      "127.0.0.1",
      "--blobPort",
      String(port),
      "--location",
      dir,
      "--disableTelemetry",
      "--skipApiVersionCheck",
      "--silent",
    ],
    startTimeoutMs: START_TIMEOUT_MS,
  });
  const url = `${running.endpoint}/${ACCOUNT}`;
  const credential = new StorageSharedKeyCredential(ACCOUNT, ACCOUNT_KEY);
  let admin: BlobServiceClient | undefined;
  const client = (): BlobServiceClient => new BlobServiceClient(url, credential);
  return {
    url,
    accountName: ACCOUNT,
    accountKey: ACCOUNT_KEY,
    connectionString: `DefaultEndpointsProtocol=http;AccountName=${ACCOUNT};AccountKey=${ACCOUNT_KEY};BlobEndpoint=${url};`,
    client,
    async createContainer(name?: string): Promise<string> {
      const container = name ?? `fenced-${randomBytes(6).toString("hex")}`;
      admin ??= client();
      await admin.getContainerClient(container).create();
      return container;
    },
    async saved(): Promise<void> {
      const since = Date.now();
      const savedAt = (file: string): number => {
        try {
          return statSync(join(running.dir, file)).mtimeMs;
        } catch {
          return 0;
        }
      };
      // Both files' timers start together when azurite starts, so both saves come in the same turn.
      await waitFor(
        "azurite to save its metadata (was any write unsaved?)",
        () => Promise.resolve(DB_FILES.every((file) => savedAt(file) > since)),
        3 * AUTOSAVE_MS,
      );
    },
    async settled(): Promise<void> {
      for (let i = 0; i < 2; i++) await answered(url);
    },
    faults: running.faults,
    stop: () => running.stop(),
  };
}

/** Resolves once `url` answers (any status) a GET sent on a new connection, closed after it. */
function answered(url: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const request = get(
      url,
      { agent: false, headers: { connection: "close" }, signal: AbortSignal.timeout(START_TIMEOUT_MS) },
      (response) => {
        response.resume();
        response.once("end", resolve);
        response.once("error", reject);
      },
    );
    request.once("error", reject);
  });
}
