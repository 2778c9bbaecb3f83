import type { FileDoc, Refusal, RefusalName, WriteOutcome } from "./backends.js";

export type Expectation = "anomaly" | "protected";

/** One client's write: the entry it added to what it had read, and what the storage answered. */
interface WriteRecord {
  readonly client: string;
  readonly entry: string;
  readonly outcome: WriteOutcome;
}

/** Something the scenario needs to have really happened, or the run proves nothing (e.g. "the lease expired while client 1 was stopped"). */
interface Precondition {
  readonly what: string;
  readonly holds: boolean;
}

export interface JudgeInput {
  readonly expected: Expectation;
  readonly writes: readonly WriteRecord[];
  readonly final: FileDoc;
  /** For a protected run: who must have been refused, and with what. */
  readonly mustRefuse?: { readonly client: string; readonly error: RefusalName };
  readonly preconditions: readonly Precondition[];
}

export interface Verdict {
  readonly expected: Expectation;
  /** anomaly: an acknowledged write is gone; protected: nothing acknowledged was lost and a stale write was refused. */
  readonly observed: Expectation | "inconclusive";
  readonly ok: boolean;
  /** Clients whose write the storage accepted but whose entry is not in the final file. */
  readonly lost: readonly string[];
  readonly refused: readonly { readonly client: string; readonly refusal: Refusal }[];
  readonly finalEntries: readonly string[];
  readonly summary: string;
  /** Why ok is false; empty when it is true. */
  readonly failures: readonly string[];
}

/**
 * Decides what a run showed. The anomaly is the one the article is about: a write the storage
 * acknowledged silently disappears, overwritten by a client that computed from an older read.
 */
export function judge(input: JudgeInput): Verdict {
  const finalEntries = [...input.final.entries];
  const lost = input.writes.filter((w) => w.outcome.accepted && !finalEntries.includes(w.entry)).map((w) => w.client);
  const refused = input.writes.flatMap((w) => (w.outcome.accepted ? [] : [{ client: w.client, refusal: w.outcome.refusal }]));
  const observed: Verdict["observed"] = lost.length > 0 ? "anomaly" : refused.length > 0 ? "protected" : "inconclusive";

  const failures: string[] = [];
  for (const p of input.preconditions) if (!p.holds) failures.push(`precondition failed: ${p.what}`);
  if (observed !== input.expected) failures.push(`expected ${input.expected}, observed ${observed}`);
  if (input.expected === "protected" && input.mustRefuse !== undefined) {
    const { client, error } = input.mustRefuse;
    const hit = refused.find((r) => r.client === client && r.refusal.error === error);
    if (hit === undefined) failures.push(`${client} was not refused with ${error}`);
    else if (
      error === "StaleTokenError" &&
      !(hit.refusal.token !== undefined && hit.refusal.highest !== undefined && BigInt(hit.refusal.token) < BigInt(hit.refusal.highest))
    ) {
      failures.push(
        `${client}'s StaleTokenError does not show a token below the highest (${hit.refusal.token ?? "?"} vs ${hit.refusal.highest ?? "?"})`,
      );
    }
  }

  const file = `the file holds ${finalEntries.map((e) => JSON.stringify(e)).join(", ")}`;
  let summary: string;
  if (observed === "anomaly") summary = `lost update: the storage acknowledged ${lost.join(" and ")}'s write, but it is gone; ${file}`;
  else if (observed === "protected")
    summary = `${refused.map((r) => `${r.client} refused (${describeRefusal(r.refusal)})`).join("; ")}; every acknowledged write survived; ${file}`;
  else summary = `no write was lost and none was refused; ${file}`;
  return { expected: input.expected, observed, ok: failures.length === 0, lost, refused, finalEntries, summary, failures };
}

export function describeRefusal(refusal: Refusal): string {
  if (refusal.error === "StaleTokenError") return `StaleTokenError: token ${refusal.token ?? "?"} < highest ${refusal.highest ?? "?"}`;
  return `VersionMismatchError: read version ${short(refusal.expected)}, now ${short(refusal.actual)}`;
}

function short(version: string | undefined): string {
  if (version === undefined) return "none";
  return version.length > 10 ? `${version.slice(0, 8)}…` : version;
}
