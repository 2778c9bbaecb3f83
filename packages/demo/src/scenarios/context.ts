import { BACKEND_TITLES } from "../backends.js";
import { Redis } from "ioredis";
import { resourceKeys } from "@fenced/lock";
import { waitFor, type RedisNodes } from "@fenced/servers";
import type { BackendConfig, BackendName, FileDoc, ReadResult, WriteOutcome } from "../backends.js";
import { LocalClient, type ClientRead, type LeaseInfo } from "../clients.js";
import type { PausedClient } from "../paused-client.js";
import { describeRefusal, type Verdict } from "../judge.js";
import { Timeline, type DemoEvent, type Lane, type RunId, type Span } from "../timeline.js";

/** What every scenario run gets from the CLI: the servers, and where to report. */
export interface ScenarioEnv {
  readonly backendName: BackendName;
  readonly backend: BackendConfig;
  readonly lock: RedisNodes;
  /** Makes this invocation's resources and keys unique, so runs never see each other's state. */
  readonly nonce: string;
  readonly onEvent: (event: DemoEvent) => void;
  /** Long waits, for the terminal only. */
  readonly progress: (message: string) => void;
}

export interface RunRecord extends RunId {
  readonly title: string;
  /** One sentence: what this run shows. */
  readonly caption: string;
  readonly lanes: readonly Lane[];
  readonly events: readonly DemoEvent[];
  readonly spans: readonly Span[];
  readonly verdict: Verdict;
}

/** The tokens of the article's figure: the lock has been granted 32 times before, the file was written under 32. */
const TOKENS_BEFORE = 31n;
const INITIAL_ENTRY = "initial";

export function updateOf(client: 1 | 2): string {
  return `client ${client}'s update`;
}

export function append(doc: FileDoc, entry: string): FileDoc {
  return { entries: [...doc.entries, entry] };
}

export function clientLane(n: 1 | 2): Lane {
  return { id: `client-${n}`, title: `client ${n}`, kind: "client", client: n };
}

export function storageLane(env: ScenarioEnv): Lane {
  return { id: "storage", title: `storage (${BACKEND_TITLES[env.backendName]})`, kind: "storage" };
}

/** Shared steps of the scenarios; each step records the event(s) it caused. */
export class RunContext {
  readonly tl: Timeline;
  readonly resource: string;
  readonly key: string;
  readonly admin: Redis[];
  readonly leases = new Map<1 | 2, Span>();

  constructor(
    readonly env: ScenarioEnv,
    run: RunId,
    lanes: readonly Lane[],
    readonly fenced: boolean,
  ) {
    this.tl = new Timeline(run, lanes, env.onEvent);
    this.resource = `demo-${env.nonce}/${run.scenario}/${run.backend}/${run.mode}`;
    this.key = `demo-${env.nonce}/${run.scenario}-${run.mode}/file.json`;
    this.admin = env.lock.urls.map((url) => new Redis(url, { maxRetriesPerRequest: 1 }));
  }

  clientSetup(n: 1 | 2): { name: string; redisUrls: readonly string[]; backend: BackendConfig; fenced: boolean } {
    return { name: `client ${n}`, redisUrls: this.env.lock.urls, backend: this.env.backend, fenced: this.fenced };
  }

  /**
   * Puts the resource where the article's figure starts: every node's counter at 31, then a previous
   * holder (token 32) writes the initial file. Clients then get 33 and 34.
   */
  async seed(lane = "storage"): Promise<void> {
    const { counter } = resourceKeys(this.resource);
    await Promise.all(this.admin.map((r) => r.set(counter, TOKENS_BEFORE.toString())));
    const setup = new LocalClient({ ...this.clientSetup(1), name: "an earlier holder" });
    try {
      const lease = await setup.acquire(this.resource, 5_000);
      const written = await setup.write(this.key, { entries: [INITIAL_ENTRY] });
      if (!written.accepted) throw new Error(`the initial write was refused: ${written.refusal.message}`);
      await setup.release();
      this.tl.event({
        kind: "setup",
        lane,
        label: this.fenced ? `file = [initial] · token ${lease.token}` : "file = [initial]",
        message: `the file holds [${INITIAL_ENTRY}], written by an earlier lock holder${this.fenced ? ` under token ${lease.token}` : ""}`,
        token: lease.token,
      });
    } finally {
      await setup.close();
    }
  }

  acquired(n: 1 | 2, info: LeaseInfo, extra: { from?: string; where?: string; pid?: number } = {}): DemoEvent {
    const e = this.tl.event({
      kind: "acquire",
      lane: extra.from ?? "lock",
      to: `client-${n}`,
      label: `acquires token ${info.token}${extra.where === undefined ? "" : ` on ${extra.where}`}`,
      message: `client ${n}${extra.pid === undefined ? "" : ` (pid ${extra.pid})`} acquires the lease${extra.where === undefined ? "" : ` on ${extra.where}`}: token ${info.token}, valid for ${info.validityMs} ms`,
      token: info.token,
    });
    this.leases.set(n, this.tl.open(e, { lane: `client-${n}`, kind: "lease", label: `lease · token ${info.token}`, client: n }));
    return e;
  }

  read(n: 1 | 2, read: ClientRead, leaseToken: string): DemoEvent {
    return this.tl.event({
      kind: "read",
      lane: "storage",
      to: `client-${n}`,
      label: `read [${read.doc.entries.map(shortEntry).join(", ")}]`,
      message: `client ${n} reads the file: [${read.doc.entries.join(", ")}]${versionNote(read)}; its lease (token ${leaseToken}) has ${read.leaseRemainingMs} ms left`,
    });
  }

  wrote(n: 1 | 2, token: string, doc: FileDoc, outcome: WriteOutcome, ifVersion?: string): DemoEvent {
    const what = `[${doc.entries.join(", ")}]`;
    const sent = this.fenced
      ? `with token ${token}${ifVersion === undefined ? "" : ` if still at version ${shortVersion(ifVersion)}`}`
      : "(plain write, no token)";
    if (outcome.accepted) {
      return this.tl.event({
        kind: "write",
        lane: `client-${n}`,
        to: "storage",
        label: this.fenced ? `write · token ${token} ✓` : "write ✓ (no token)",
        message: `client ${n} writes ${what} ${sent}: the storage accepts it`,
        token,
        outcome: "accepted",
      });
    }
    const r = outcome.refusal;
    return this.tl.event({
      kind: "write",
      lane: `client-${n}`,
      to: "storage",
      label: r.error === "StaleTokenError" ? `write · token ${token} ✗ (${r.highest ?? "?"} seen)` : `write · token ${token} ✗ version`,
      message: `client ${n} writes ${what} ${sent}: refused with ${describeRefusal(r)}`,
      token,
      outcome: "refused",
      refusal: r,
    });
  }

  registered(n: 1 | 2, token: string, outcome: WriteOutcome): DemoEvent {
    return this.tl.event({
      kind: "register",
      lane: `client-${n}`,
      to: "storage",
      label: `register · token ${token}${outcome.accepted ? " ✓" : " ✗"}`,
      message: outcome.accepted
        ? `client ${n} registers token ${token} with the storage right after acquiring (fence-on-acquire): older tokens are refused from now on`
        : `client ${n} tries to register token ${token}: refused with ${describeRefusal(outcome.refusal)}`,
      token,
      ...(outcome.accepted ? { outcome: "accepted" as const } : { outcome: "refused" as const, refusal: outcome.refusal }),
    });
  }

  released(n: 1 | 2, token: string, lockLane = "lock"): DemoEvent {
    const e = this.tl.event({
      kind: "release",
      lane: `client-${n}`,
      to: lockLane,
      label: "release",
      message: `client ${n} releases its lease (token ${token})`,
      token,
    });
    this.tl.close(this.leases.get(n), e);
    return e;
  }

  /** Stops the client's whole process; its lease keeps running out on the lock nodes meanwhile. */
  async pause(n: 1 | 2, client: PausedClient, when: string): Promise<{ event: DemoEvent; span: Span }> {
    const how = await client.pause();
    const event = this.tl.event({
      kind: "pause",
      lane: `client-${n}`,
      label: "stopped (SIGSTOP)",
      message: `client ${n} is stopped with SIGSTOP (pid ${client.pid}, ${how}), like a stop-the-world GC pause, ${when}`,
    });
    return { event, span: this.tl.open(event, { lane: `client-${n}`, kind: "pause", label: "paused (SIGSTOP)", client: n }) };
  }

  /** SIGCONT. The caller has already queued the client's next step (its write) in the IPC pipe. */
  resume(n: 1 | 2, client: PausedClient, paused: { event: DemoEvent; span: Span }): DemoEvent {
    client.resume();
    const event = this.tl.event({
      kind: "resume",
      lane: `client-${n}`,
      label: "resumed (SIGCONT)",
      message: `client ${n} resumes (SIGCONT) after ${this.tl.now() - paused.event.t} ms stopped, and goes on with its write, unaware its lease expired`,
    });
    this.tl.close(paused.span, event);
    return event;
  }

  /** Waits until no lock node holds this lease's key any more: the lease has really expired. */
  async leaseGone(n: 1 | 2, info: LeaseInfo, ttlMs: number, why: string): Promise<DemoEvent> {
    this.env.progress(`waiting for client ${n}'s lease to expire on the lock nodes (≈${(ttlMs / 1000).toFixed(1)} s)…`);
    const { lease } = resourceKeys(this.resource);
    await waitFor(
      `client ${n}'s lease key to expire on every lock node`,
      async () => !(await Promise.all(this.admin.map((r) => r.get(lease)))).includes(info.value),
      ttlMs + 10_000,
    );
    const e = this.tl.event({
      kind: "expire",
      lane: `client-${n}`,
      label: "lease expired",
      message: `client ${n}'s lease (token ${info.token}) has expired: no lock node holds its key any more${why}`,
      token: info.token,
    });
    this.tl.close(this.leases.get(n), e);
    return e;
  }

  /** Reads the file once everything is over, and names the acknowledged updates it lacks. */
  async final(writes: readonly { client: string; entry: string; outcome: WriteOutcome }[]): Promise<ReadResult> {
    const reader = new LocalClient({ ...this.clientSetup(1), name: "reader" });
    try {
      const read = await reader.read(this.key);
      const lost = writes.filter((w) => w.outcome.accepted && !read.doc.entries.includes(w.entry)).map((w) => w.client);
      const file = `[${read.doc.entries.map(shortEntry).join(", ")}]`;
      this.tl.event({
        kind: "final",
        lane: "storage",
        label: lost.length === 0 ? `file = ${file}` : `file = ${file}: ${lost.join(", ")}'s update lost`,
        message: `afterwards the file holds [${read.doc.entries.join(", ")}]${lost.length === 0 ? "" : `: the acknowledged update of ${lost.join(" and ")} is gone`}`,
        lost,
      });
      return read;
    } finally {
      await reader.close();
    }
  }

  close(): void {
    for (const r of this.admin) r.disconnect();
  }
}

/** "client 2's update" → "client 2": the diagram has little room. */
function shortEntry(entry: string): string {
  return entry.replace(/'s update$/, "");
}

function shortVersion(version: string): string {
  return version.length > 10 ? `${version.slice(0, 8)}…` : version;
}

function versionNote(read: ReadResult): string {
  return read.version === undefined ? "" : ` (version ${shortVersion(read.version)})`;
}
