// The load generator of overload.bench.ts, in a process of its own (forked from the benchmark with the
// same node flags), so that neither the gateway's event loop nor the benchmark's garbage collector
// delays a send. Each job is one phase of credential writes (PUT /v1/records/{key} with a signed
// Fencing-Credential) by one API key, over its resources in turn:
// - closed: `connections` clients, each sending its next write once the last was answered;
// - open: one write every 1000/rate ms whatever the answers, each timed from its scheduled send, over
//   `connections` keep-alive sockets opened before the phase (Generator.open, as a load balancer
//   keeps its connections): a write that waits for a free socket waits in its latency. A closed job
//   runs on connections opened before it too, when its phase asks for them.
// Connections opened before a job are closed when the phase asks (Generator.close, once it has read
// the server), not as the job ends (unless writes are still out on them): their closing is not in
// the phase's figures.
// Answers are sorted into accepted (2xx), shed (503 with the problem type /problems/overloaded) and
// other (by status, and for a 503 by its problem type; transport errors by code).
import { fork, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { setPriority } from "node:os";
import { PerformanceObserver } from "node:perf_hooks";
import { setTimeout as delay } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { Client } from "undici";
import { latencyOf, round3, type Latency } from "./measure.js";

export interface Job {
  readonly origin: string;
  readonly mode: "closed" | "open";
  /** Writes per second (open) — ignored by a closed job. */
  readonly ratePerSec: number;
  /** Clients (closed) or the most sockets the generator may open (open). */
  readonly connections: number;
  readonly durationMs: number;
  /** When the phase starts (Date.now() clock), so that two generators start together. */
  readonly startAtMs: number;
  /** How long after the last send the answers are waited for; writes still out then are counted unanswered. */
  readonly drainLimitMs: number;
  readonly apiKey: string;
  /** Record w is `${keyPrefix}${w}`, written with credentials[w]. */
  readonly keyPrefix: string;
  readonly credentials: readonly string[];
}

export interface JobResult {
  /** The phase's sending window (ms): the schedule's length, or the closed loop's run until its last answer. */
  readonly windowMs: number;
  readonly sent: number;
  readonly accepted: number;
  readonly shed: number;
  /** Of those, the answers that arrived within the window: the throughput while the load lasted. */
  readonly acceptedInWindow: number;
  readonly shedInWindow: number;
  /** Every other answer, by status ("503 /problems/unavailable" for a 503 of another type, "error ECONNRESET" for no answer). */
  readonly other: Readonly<Record<string, number>>;
  /** Writes with no answer by the drain limit (their connections were closed on them). */
  readonly unanswered: number;
  /** Latency of the accepted writes, from each write's scheduled send (open) or its send (closed), ms. */
  readonly acceptedLatency: Latency;
  /** The slowest answer of any kind (ms); with unanswered writes, a lower bound. */
  readonly anyMaxMs: number;
  /** How late each send left against its schedule (ms), open jobs only: the generator's own lag. */
  readonly sendLag: Latency;
  /** From the last send to the last answer (or the drain limit), ms. */
  readonly drainMs: number;
  /** The generator's own CPU (cores: CPU seconds ÷ the phase's seconds, drain included) and garbage-collection pauses: why it fell behind, when it did. */
  readonly generatorCores: number;
  readonly generatorGcMaxMs: number;
  readonly generatorGcTotalMs: number;
  /** Writes that found every socket busy and waited for one (the wait is in their latency), and the longest wait (ms). */
  readonly socketWaits: number;
  readonly socketWaitMaxMs: number;
  /** Connections opened and answered before the phase's start (when the phase opened them), of `connections`. */
  readonly preopened: number;
}

interface Tally {
  accepted: number;
  shed: number;
  acceptedInWindow: number;
  shedInWindow: number;
  other: Record<string, number>;
  acceptedLatencies: number[];
  anyMaxMs: number;
  socketWaits: number;
  socketWaitMaxMs: number;
}

const OVERLOADED = "/problems/overloaded";

/**
 * Up to `max` keep-alive connections, each carrying one write at a time; a write that finds none free
 * waits, first come first served, for the next to free up. O(1) a write: undici's Pool looks through
 * its connections for a free one on every dispatch, which with 2,048 busy ones delayed the sends by
 * over 100 ms.
 */
class Connections {
  private readonly all: Client[] = [];
  private readonly idle: Client[] = [];
  private readonly waiting: ((client: Client) => void)[] = [];
  private head = 0;

  constructor(
    readonly origin: string,
    private readonly max: number,
  ) {}

  /** The connections open() made that answered before the phase. */
  preopened = 0;

  /** Whether these connections were opened for `job`: to the same server, as many. */
  isFor(job: Pick<Job, "origin" | "connections">): boolean {
    return job.origin === this.origin && job.connections === this.max;
  }

  /** A free connection, or the promise of the next one to free up. */
  take(): Client | Promise<Client> {
    const idle = this.idle.pop();
    if (idle !== undefined) return idle;
    if (this.all.length < this.max) {
      const client = new Client(this.origin, { pipelining: 1 });
      this.all.push(client);
      return client;
    }
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  give(client: Client): void {
    const next = this.waiting[this.head];
    if (next === undefined) {
      this.idle.push(client);
      return;
    }
    this.waiting[this.head++] = undefined as never; // released as it is served, not kept for the phase
    if (this.head === this.waiting.length) this.waiting.length = this.head = 0;
    next(client);
  }

  /**
   * Opens connections up to `count` before a phase, each carrying one GET /livez, and keeps them
   * idle for the phase; resolves with how many were answered by `deadline` (performance.now() clock).
   * A server takes a new connection from its accept queue once per turn of its event loop: without
   * this, a busy server left most of a phase's new connections there, and the phase measured that
   * queue (docs/benchmarks.md).
   */
  async open(count: number, deadline: number): Promise<number> {
    const opening = Array.from({ length: Math.max(0, Math.min(count, this.max) - this.all.length) }, async () => {
      const client = new Client(this.origin, { pipelining: 1 });
      this.all.push(client);
      try {
        const signal = AbortSignal.timeout(Math.max(1, Math.ceil(deadline - performance.now())));
        await (await client.request({ method: "GET", path: "/livez", signal })).body.dump();
        this.give(client);
        return 1;
      } catch {
        // Not answered in time: it is the phase's to connect, as without this — last, under the open ones.
        this.idle.unshift(client);
        return 0;
      }
    });
    this.preopened += (await Promise.all(opening)).reduce<number>((a, b) => a + b, 0);
    return this.preopened;
  }

  /** Closes every connection (once); writes still waiting for one never get it (they count as unanswered). */
  async destroy(): Promise<void> {
    const all = this.all.splice(0);
    await Promise.all(all.map((c) => c.destroy()));
  }
}

/** Sends write i (to record i mod the resources) and sorts its answer into `tally`, timed from `from`. */
async function write(connections: Connections, job: Job, i: number, from: number, windowEnd: number, tally: Tally): Promise<void> {
  const w = i % job.credentials.length;
  let kind: string;
  const free = connections.take();
  let client: Client;
  if (free instanceof Promise) {
    // Every socket is busy: this write waits for one, and its latency with it.
    const asked = performance.now();
    client = await free;
    tally.socketWaits++;
    tally.socketWaitMaxMs = Math.max(tally.socketWaitMaxMs, performance.now() - asked);
  } else client = free;
  try {
    const res = await client.request({
      method: "PUT",
      path: `/v1/records/${job.keyPrefix}${w}`,
      headers: {
        authorization: `Bearer ${job.apiKey}`,
        "fencing-credential": job.credentials[w] as string,
        "content-type": "application/json",
      },
      body: JSON.stringify({ writer: w, seq: i, note: "invoice total updated" }),
    });
    if (res.statusCode === 503) {
      // Only a 503's body is read: its problem type tells a shed write from a store that is down.
      const text = await res.body.text();
      const type = problemType(text);
      kind = type === OVERLOADED || type.endsWith(OVERLOADED) ? "shed" : `503 ${type}`;
    } else {
      await res.body.dump();
      kind = res.statusCode >= 200 && res.statusCode < 300 ? "accepted" : String(res.statusCode);
    }
  } catch (err) {
    kind = `error ${(err as { code?: string }).code ?? (err as Error).name}`;
  } finally {
    connections.give(client);
  }
  const done = performance.now();
  const latency = done - from;
  tally.anyMaxMs = Math.max(tally.anyMaxMs, latency);
  if (kind === "accepted") {
    tally.accepted++;
    tally.acceptedLatencies.push(latency);
    if (done <= windowEnd) tally.acceptedInWindow++;
  } else if (kind === "shed") {
    tally.shed++;
    if (done <= windowEnd) tally.shedInWindow++;
  } else tally.other[kind] = (tally.other[kind] ?? 0) + 1;
}

function problemType(body: string): string {
  try {
    const type = (JSON.parse(body) as { type?: unknown }).type;
    return typeof type === "string" ? type : "(no type)";
  } catch {
    return "(not JSON)";
  }
}

/** This process's garbage-collection pauses from now until stop(). */
function gcPauses(): { stop(): { maxMs: number; totalMs: number } } {
  let maxMs = 0;
  let totalMs = 0;
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      maxMs = Math.max(maxMs, entry.duration);
      totalMs += entry.duration;
    }
  });
  observer.observe({ entryTypes: ["gc"] });
  return {
    stop: () => {
      observer.disconnect();
      return { maxMs, totalMs };
    },
  };
}

/**
 * Runs one job in this process, on `opened` (Connections.open) when they were opened for it: those
 * are left open for the caller to close, unless writes are still out on them.
 */
async function run(job: Job, opened: Connections | undefined): Promise<JobResult> {
  const connections = opened ?? new Connections(job.origin, job.connections);
  const tally: Tally = {
    accepted: 0,
    shed: 0,
    acceptedInWindow: 0,
    shedInWindow: 0,
    other: {},
    acceptedLatencies: [],
    anyMaxMs: 0,
    socketWaits: 0,
    socketWaitMaxMs: 0,
  };
  const gc = gcPauses();
  // The shared start, on this process's clock.
  const start = performance.now() + (job.startAtMs - Date.now());
  const windowEnd = start + job.durationMs;
  if (start - performance.now() >= 1) await delay(start - performance.now());
  const cpu0 = process.cpuUsage();
  const lags: number[] = [];
  const outstanding = new Set<Promise<void>>();
  let sent = 0;
  const send = (from: number): Promise<void> => {
    const p = write(connections, job, sent++, from, windowEnd, tally).finally(() => outstanding.delete(p));
    outstanding.add(p);
    return p;
  };
  if (job.mode === "open") {
    const interval = 1000 / job.ratePerSec;
    const total = Math.floor((job.durationMs * job.ratePerSec) / 1000);
    while (sent < total) {
      // Every send that is due goes now, each timed from its own scheduled time; then sleep to the next
      // (at least 1 ms: the timers are no finer, and spinning would take a core from the gateway).
      const now = performance.now();
      while (sent < total && start + sent * interval <= now) {
        const scheduled = start + sent * interval;
        lags.push(performance.now() - scheduled);
        void send(scheduled);
      }
      if (sent < total) await delay(Math.max(1, start + sent * interval - performance.now()));
    }
  } else {
    await Promise.all(
      Array.from({ length: job.connections }, async () => {
        while (performance.now() < windowEnd) await send(performance.now());
      }),
    );
  }
  const lastSend = performance.now();
  const limit = new AbortController();
  const drained = Promise.all([...outstanding]).then(() => true);
  const cut = delay(Math.max(0, lastSend + job.drainLimitMs - performance.now()), false, { signal: limit.signal }).catch(() => false);
  const inTime = await Promise.race([drained, cut]);
  limit.abort();
  const unanswered = inTime ? 0 : outstanding.size;
  const drainMs = performance.now() - lastSend;
  const windowMs = job.mode === "open" ? job.durationMs : performance.now() - start;
  const cpu = process.cpuUsage(cpu0);
  const pauses = gc.stop();
  // Writes still out are cut as the connections close below; they settle as errors after this tally is read.
  const result: JobResult = {
    windowMs,
    sent,
    accepted: tally.accepted,
    shed: tally.shed,
    acceptedInWindow: job.mode === "open" ? tally.acceptedInWindow : tally.accepted,
    shedInWindow: job.mode === "open" ? tally.shedInWindow : tally.shed,
    other: { ...tally.other },
    unanswered,
    acceptedLatency: latencyOf(tally.acceptedLatencies),
    anyMaxMs: Math.round(tally.anyMaxMs),
    sendLag: latencyOf(lags),
    drainMs: Math.round(drainMs),
    generatorCores: round3((cpu.user + cpu.system) / 1000 / (performance.now() - start)),
    generatorGcMaxMs: round3(pauses.maxMs),
    generatorGcTotalMs: Math.round(pauses.totalMs),
    socketWaits: tally.socketWaits,
    socketWaitMaxMs: Math.round(tally.socketWaitMaxMs),
    preopened: connections.preopened,
  };
  if (opened === undefined || unanswered > 0) await connections.destroy();
  return result;
}

/** A generator process: run(job) sends the job to it and resolves with its result. */
export interface Generator {
  /** Whether the generator runs ahead of the other processes for the CPU, and why not. */
  readonly priority: string;
  /** Opens `connections` to `origin` for its next job there (Connections.open); resolves with how many answered. */
  open(origin: string, connections: number): Promise<number>;
  run(job: Job): Promise<JobResult>;
  /** Closes the connections opened for the last job, which it left open. */
  close(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * The generator's niceness. The gateway, PostgreSQL and the generator share two cores; a generator
 * waiting for a core would send in bursts, an artefact of sharing one machine that a remote client
 * does not have. Ahead of the others it sends on time and takes no more CPU than it would anyway.
 */
const GENERATOR_NICE = -10;

export async function startGenerator(): Promise<Generator> {
  // A young generation large enough that the writes waiting for a socket die young: fewer, shorter pauses in the schedule.
  const child: ChildProcess = fork(fileURLToPath(import.meta.url), [], {
    execArgv: [...process.execArgv, "--max-semi-space-size=64"],
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  await once(child, "spawn");
  let priority = `raised (nice ${GENERATOR_NICE})`;
  try {
    if (child.pid === undefined) throw new Error("no pid"); // pid 0 would be this process
    setPriority(child.pid, GENERATOR_NICE);
  } catch (err) {
    priority = `as the benchmark's: could not raise it (${(err as { code?: string }).code ?? String(err)})`;
  }
  const exited = once(child, "exit").then(([code]) => {
    throw new Error(`the load generator exited with ${String(code)}`);
  });
  exited.catch(() => undefined); // read by each run; a stop is no failure
  return {
    priority,
    open: async (origin, connections) => {
      const answer = once(child, "message") as Promise<[number]>;
      child.send({ open: { origin, connections } } satisfies Message);
      return (await Promise.race([answer, exited]))[0];
    },
    run: async (job) => {
      const answer = once(child, "message") as Promise<[JobResult]>;
      child.send({ job } satisfies Message);
      return (await Promise.race([answer, exited]))[0];
    },
    close: async () => {
      const answer = once(child, "message");
      child.send({ close: true } satisfies Message);
      await Promise.race([answer, exited]);
    },
    stop: async () => {
      child.disconnect();
      await exited.catch(() => undefined);
    },
  };
}

/** What the benchmark sends a generator: connections to open for the next job, the job, or to close the last job's. */
type Message =
  { readonly open: { readonly origin: string; readonly connections: number } } | { readonly job: Job } | { readonly close: true };
/** The longest a generator takes to open a job's connections. */
const OPEN_LIMIT_MS = 10_000;

// Forked by startGenerator: does what it is sent, one thing at a time, and answers with its result.
if (process.argv[1] === fileURLToPath(import.meta.url) && process.send !== undefined) {
  let queue = Promise.resolve();
  let opened: Connections | undefined;
  /** The last job's connections, opened before it and left open by it. */
  let spent: Connections | undefined;
  process.on("message", (message: Message) => {
    queue = queue.then(async () => {
      await spent?.destroy();
      spent = undefined;
      if ("close" in message) process.send?.(0);
      else if ("open" in message) {
        await opened?.destroy();
        opened = new Connections(message.open.origin, message.open.connections);
        process.send?.(await opened.open(message.open.connections, performance.now() + OPEN_LIMIT_MS));
      } else {
        const prepared = opened;
        opened = undefined;
        // Connections opened for another job (another server, or as many) are not this one's.
        const forJob = prepared?.isFor(message.job) === true ? prepared : undefined;
        if (prepared !== undefined && forJob === undefined) await prepared.destroy();
        process.send?.(await run(message.job, forJob));
        spent = forJob;
      }
    });
  });
}
