import { performance } from "node:perf_hooks";
import type { Refusal } from "./backends.js";

export type ScenarioName = "gc-pause" | "clock-jump" | "both-paused";

type LaneKind = "client" | "lock" | "node" | "storage";

export interface Lane {
  readonly id: string;
  readonly title: string;
  readonly kind: LaneKind;
  /** Clients are drawn in their own colour; a node's lease bar takes its holder's. */
  readonly client?: 1 | 2;
}

type EventKind =
  | "setup"
  | "acquire"
  | "read"
  | "pause"
  | "expire"
  | "resume"
  | "write"
  | "register"
  | "release"
  | "clock-jump"
  | "partition"
  | "heal"
  | "both-hold"
  | "final";

export interface DemoEvent {
  /** Unique in the whole output: `<scenario>/<backend>/<mode>#<seq>`; the pictures carry it too. */
  readonly id: string;
  /** 1, 2, 3 … within the run: the number drawn beside the event. */
  readonly seq: number;
  /** ms since the run started. */
  readonly t: number;
  readonly kind: EventKind;
  /** Where the event sits; arrows go from `lane` to `to`. */
  readonly lane: string;
  readonly to?: string;
  /** A few words drawn on the diagram. */
  readonly label: string;
  /** The sentence narrated in the terminal and listed under the diagram. */
  readonly message: string;
  readonly token?: string;
  readonly outcome?: "accepted" | "refused";
  readonly refusal?: Refusal;
  /** On the final read: whose acknowledged updates are missing from the file. */
  readonly lost?: readonly string[];
}

export type SpanKind = "lease" | "pause" | "held" | "cut-off";

/** Something that lasts: a lease, a pause, a key held on one node. Bounded by events, so it lines up with them. */
export interface Span {
  readonly lane: string;
  readonly kind: SpanKind;
  readonly label: string;
  readonly client?: 1 | 2;
  readonly fromSeq: number;
  /** undefined: still open when the run ended. */
  toSeq: number | undefined;
}

export interface RunId {
  readonly scenario: ScenarioName;
  readonly backend: string;
  readonly mode: string;
}

export type EventInput = Omit<DemoEvent, "id" | "seq" | "t">;

/** Collects a run's events and spans, and hands each event to the narrator as it happens. */
export class Timeline {
  readonly events: DemoEvent[] = [];
  readonly spans: Span[] = [];
  /** Set by the first event: forking clients and connecting is not part of the story. */
  private started: number | undefined;

  constructor(
    readonly run: RunId,
    readonly lanes: readonly Lane[],
    private readonly onEvent: (event: DemoEvent) => void,
  ) {}

  /** ms since the run started. */
  now(): number {
    this.started ??= performance.now();
    return Math.round(performance.now() - this.started);
  }

  event(input: EventInput): DemoEvent {
    const seq = this.events.length + 1;
    const event: DemoEvent = { id: `${this.run.scenario}/${this.run.backend}/${this.run.mode}#${seq}`, seq, t: this.now(), ...input };
    this.events.push(event);
    this.onEvent(event);
    return event;
  }

  /** Opens a span at an event (usually the one just recorded). */
  open(from: DemoEvent, span: { lane: string; kind: SpanKind; label: string; client?: 1 | 2 }): Span {
    const opened: Span = { ...span, fromSeq: from.seq, toSeq: undefined };
    this.spans.push(opened);
    return opened;
  }

  close(span: Span | undefined, at: DemoEvent): void {
    if (span !== undefined && span.toSeq === undefined) span.toSeq = at.seq;
  }
}
