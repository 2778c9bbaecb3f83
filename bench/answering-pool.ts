// A pool of pg.Pool's shape whose one client answers every statement at once, a turn later as a
// socket's answer would come, with one row (a version): what store-overhead.bench.ts and
// gateway-overhead.bench.ts run the store on, so that they time its own work and the gateway's,
// PostgreSQL taken out. Both forms of connect() (the store checks out with the callback), the
// client's listener methods, and the size and counts the gateway reads (the admission floor, /metrics).

/** What every statement answers. */
const answer = { rows: [{ version: "7" }], rowCount: 1, command: "INSERT" };

const client = {
  query: async (_config?: unknown): Promise<typeof answer> => {
    await Promise.resolve();
    return answer;
  },
  release: (): void => undefined,
  on: (): void => undefined,
  removeListener: (): void => undefined,
};

type AnsweringClient = typeof client;

function connect(): Promise<AnsweringClient>;
function connect(callback: (err: undefined, c: AnsweringClient) => void): undefined;
function connect(callback?: (err: undefined, c: AnsweringClient) => void): Promise<AnsweringClient> | undefined {
  if (callback === undefined) return Promise.resolve(client);
  process.nextTick(() => callback(undefined, client));
  return undefined;
}

/** The pool (one shared client: every checkout gets it at once), of `size` connections as the gateway reads it. */
export function answeringPool(size = 16) {
  return {
    options: { max: size },
    totalCount: size,
    idleCount: size,
    waitingCount: 0,
    query: client.query,
    connect,
    on: (): void => undefined,
  };
}
