import type { CheckResult } from "./checker.js";
import { STORE_FAULTS, type FaultKind, type HistoryEvent, type NemesisEvent, type OpEvent } from "./history.js";

/**
 * An SVG of one run over time: the tokens of acknowledged writes (a stale write shows as a dot below
 * the staircase), one lane per worker with every operation as a bar coloured by its outcome, and one
 * lane per faulted Redis node. Faults are shaded where they act; operations in a violation are red.
 */

const WIDTH = 1400;
const LEFT = 120;
const RIGHT = 20;
const TOKENS_HEIGHT = 220;
const LANE = 20;

const OUTCOME_COLOURS: Record<string, string> = {
  ok: "#3a9a4a",
  "fail:stale": "#e08a1e",
  "fail:version": "#8a5ac8",
  "fail:refused": "#c06040",
  "fail:lock": "#b0b0b0",
  "fail:unavailable": "#909090",
  "fail:error": "#ff00ff",
  info: "#e0c020",
  open: "#d0d0ff",
};
const FAULT_COLOURS: Record<FaultKind, string> = {
  "pause-worker": "#606060",
  "pause-in-rmw": "#202080",
  delay: "#2080d0",
  "pause-redis": "#e0a030",
  "kill-redis": "#a02020",
  "wipe-redis": "#000000",
  "clock-jump": "#c020c0",
  reset: "#40c0c0",
  "pause-gateway": "#00a080",
  "pause-postgres": "#806000",
  "kill-postgres": "#600000",
  "pause-s3": "#806000",
  "kill-s3": "#600000",
  "pause-dynamodb": "#806000",
  "kill-dynamodb": "#600000",
  "pause-azure-blob": "#806000",
  "skew-s3": "#c020c0",
};
const RESOURCE_COLOURS = ["#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#bcbd22"];

const esc = (s: string): string => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
const n = (x: number): string => (Math.round(x * 10) / 10).toString();

interface Interval {
  kind: FaultKind;
  target: string;
  worker: number | undefined;
  start: number;
  end: number;
}

function faultIntervals(events: readonly NemesisEvent[], endOfRun: number): Interval[] {
  const open = new Map<number, Interval>();
  const done: Interval[] = [];
  for (const e of events) {
    if (e.phase === "start") open.set(e.fault, { kind: e.kind, target: e.target, worker: e.worker, start: e.mono, end: endOfRun });
    if (e.phase === "end") {
      const interval = open.get(e.fault);
      if (interval !== undefined) {
        interval.end = e.mono;
        done.push(interval);
        open.delete(e.fault);
      }
    }
  }
  return [...done, ...open.values()];
}

function tickStep(spanMs: number): number {
  for (const step of [100, 250, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000, 120_000, 300_000]) if (spanMs / step <= 14) return step;
  return 600_000;
}

export function plotHistory(history: readonly HistoryEvent[], result: CheckResult, options: { title: string; ttlMs: number }): string {
  const ops = history.filter((e): e is OpEvent => e.type !== "nemesis" && e.type !== "final");
  const nemesis = history.filter((e): e is NemesisEvent => e.type === "nemesis");
  const endOfRun = history.reduce((max, e) => (e.type === "final" ? max : Math.max(max, e.mono)), 1);
  const x = (t: number): number => LEFT + (Math.max(0, t) / endOfRun) * (WIDTH - LEFT - RIGHT);
  const faults = faultIntervals(nemesis, endOfRun);
  const bad = new Set(result.victims);
  const resources = [...new Set(ops.map((e) => e.resource))].sort();
  const workers = [...new Set(ops.map((e) => e.worker))].sort((a, b) => a - b);
  // One lane per faulted Redis node ("redis C"), then one for the gateway process if it was paused.
  const laneName = (f: Interval): string | undefined =>
    f.target.startsWith("redis ")
      ? `redis ${f.target.split(" ")[1] ?? "?"}`
      : f.kind === "pause-gateway"
        ? "gateway"
        : STORE_FAULTS.has(f.kind)
          ? "store"
          : undefined;
  const named = new Set(faults.flatMap((f) => laneName(f) ?? []));
  const nodes = [...[...named].filter((name) => name !== "gateway").sort(), ...(named.has("gateway") ? ["gateway"] : [])];

  const out: string[] = [];
  let y = 40;
  out.push(`<text x="${LEFT}" y="22" font-size="15" font-weight="bold">${esc(options.title)}</text>`);
  const o = result.ops.byOutcome;
  const summary = `${result.ops.total} ops · ok ${o.ok} · refused ${o.refused} · unavailable ${o.unavailable} · outcome unknown ${o["outcome-unknown"]} (landed ${result.ops.outcomeUnknown.landed}) · repeated tokens ${result.repeatedTokens} · violations: ${Object.entries(
    result.violations,
  )
    .map(([k, v]) => `${k} ${v}`)
    .join(", ")} · TTL ${options.ttlMs} ms`;
  out.push(`<text x="${WIDTH - RIGHT}" y="22" font-size="12" text-anchor="end">${esc(summary)}</text>`);

  // Panel 1: tokens of acknowledged writes, by acknowledgement time.
  const acked = ops.filter((e): e is Extract<OpEvent, { type: "ok" }> => e.type === "ok");
  const tokens = acked.map((e) => Number(e.token));
  const lo = tokens.reduce((a, b) => Math.min(a, b), 0);
  const hi = tokens.reduce((a, b) => Math.max(a, b), 1);
  const ty = (t: number): number => y + TOKENS_HEIGHT - ((t - lo) / Math.max(1, hi - lo)) * TOKENS_HEIGHT;
  out.push(`<text x="${LEFT - 8}" y="${y + 10}" font-size="11" text-anchor="end">token ${hi}</text>`);
  out.push(`<text x="${LEFT - 8}" y="${y + TOKENS_HEIGHT}" font-size="11" text-anchor="end">${lo}</text>`);
  out.push(`<text x="${LEFT - 8}" y="${y + TOKENS_HEIGHT / 2}" font-size="11" text-anchor="end">accepted writes</text>`);
  out.push(`<rect x="${LEFT}" y="${y}" width="${WIDTH - LEFT - RIGHT}" height="${TOKENS_HEIGHT}" fill="none" stroke="#ccc"/>`);
  for (const f of faults) {
    if (f.kind === "pause-in-rmw" || f.kind === "pause-worker" || f.kind === "pause-gateway") {
      out.push(
        `<rect x="${n(x(f.start))}" y="${y}" width="${n(Math.max(1, x(f.end) - x(f.start)))}" height="${TOKENS_HEIGHT}" fill="${FAULT_COLOURS[f.kind]}" opacity="0.07"/>`,
      );
    }
  }
  for (const e of acked) {
    const colour = RESOURCE_COLOURS[resources.indexOf(e.resource) % RESOURCE_COLOURS.length] ?? "#000";
    const isBad = bad.has(e.op);
    out.push(
      `<circle cx="${n(x(e.mono))}" cy="${n(ty(Number(e.token)))}" r="${isBad ? 4 : 1.6}" fill="${isBad ? "#e00000" : colour}"><title>${esc(`${e.op} ${e.resource} token ${e.token} wrote ${e.wrote}`)}</title></circle>`,
    );
  }
  y += TOKENS_HEIGHT + 20;

  // Panel 2: one lane per worker.
  const byOp = new Map<string, OpEvent[]>();
  for (const e of ops) {
    const list = byOp.get(e.op);
    if (list === undefined) byOp.set(e.op, [e]);
    else list.push(e);
  }
  const laneOf = new Map(workers.map((w, i) => [w, y + i * LANE]));
  for (const [w, top] of laneOf) {
    out.push(`<text x="${LEFT - 8}" y="${top + LANE - 6}" font-size="11" text-anchor="end">worker ${w}</text>`);
    out.push(`<line x1="${LEFT}" x2="${WIDTH - RIGHT}" y1="${top + LANE}" y2="${top + LANE}" stroke="#eee"/>`);
  }
  for (const [id, events] of byOp) {
    const first = events[0];
    const last = events.find((e) => e.type === "ok" || e.type === "fail" || e.type === "info");
    const top = first === undefined ? undefined : laneOf.get(first.worker);
    if (first === undefined || top === undefined) continue;
    const key = last === undefined ? "open" : last.type === "fail" ? `fail:${last.reason}` : last.type;
    const start = Math.min(...events.map((e) => e.mono));
    const end = last?.mono ?? endOfRun;
    const stroke = bad.has(id) ? ` stroke="#e00000" stroke-width="2"` : "";
    out.push(
      `<rect x="${n(x(start))}" y="${top + 5}" width="${n(Math.max(0.8, x(end) - x(start)))}" height="${LANE - 10}" fill="${OUTCOME_COLOURS[key] ?? "#000"}"${stroke}><title>${esc(`${id} ${key}`)}</title></rect>`,
    );
  }
  // Over the operations, translucent: in a busy lane the bars would hide them.
  for (const f of faults) {
    const top = f.worker === undefined ? undefined : laneOf.get(f.worker);
    if (top === undefined) continue;
    out.push(
      `<rect x="${n(x(f.start))}" y="${top}" width="${n(Math.max(1.5, x(f.end) - x(f.start)))}" height="${LANE}" fill="${FAULT_COLOURS[f.kind]}" opacity="0.35"><title>${esc(`${f.kind}: ${f.target}, ${Math.round(f.end - f.start)} ms`)}</title></rect>`,
    );
  }
  y += workers.length * LANE + 16;

  // Panel 3: Redis nodes that were faulted, and the gateway.
  for (const [i, name] of nodes.entries()) {
    const top = y + i * LANE;
    out.push(`<text x="${LEFT - 8}" y="${top + LANE - 6}" font-size="11" text-anchor="end">${esc(name)}</text>`);
    out.push(`<line x1="${LEFT}" x2="${WIDTH - RIGHT}" y1="${top + LANE}" y2="${top + LANE}" stroke="#eee"/>`);
    for (const f of faults.filter((f) => f.worker === undefined && laneName(f) === name)) {
      const title = `<title>${esc(`${f.kind}: ${f.target}`)}</title>`;
      if (f.kind === "clock-jump") {
        out.push(
          `<line x1="${n(x(f.start))}" x2="${n(x(f.start))}" y1="${top + 2}" y2="${top + LANE - 2}" stroke="${FAULT_COLOURS[f.kind]}" stroke-width="2">${title}</line>`,
        );
      } else {
        out.push(
          `<rect x="${n(x(f.start))}" y="${top + 3}" width="${n(Math.max(1.5, x(f.end) - x(f.start)))}" height="${LANE - 6}" fill="${FAULT_COLOURS[f.kind]}" opacity="0.6">${title}</rect>`,
        );
      }
    }
  }
  y += nodes.length * LANE + 10;

  // Time axis.
  const step = tickStep(endOfRun);
  for (let t = 0; t <= endOfRun; t += step) {
    out.push(`<line x1="${n(x(t))}" x2="${n(x(t))}" y1="${y}" y2="${y + 5}" stroke="#333"/>`);
    out.push(
      `<text x="${n(x(t))}" y="${y + 17}" font-size="11" text-anchor="middle">${step >= 1_000 ? `${t / 1_000} s` : `${t} ms`}</text>`,
    );
  }
  y += 34;

  // Legend.
  const legend: [string, string][] = [
    ...Object.entries(OUTCOME_COLOURS).map(([k, c]): [string, string] => [k === "open" ? "unfinished" : k, c]),
    ...Object.entries(FAULT_COLOURS).map(([k, c]): [string, string] => [k, c]),
    ["in a violation", "#e00000"],
  ];
  let lx = LEFT;
  for (const [label, colour] of legend) {
    out.push(
      `<rect x="${lx}" y="${y - 9}" width="10" height="10" fill="${colour}"/><text x="${lx + 14}" y="${y}" font-size="11">${esc(label)}</text>`,
    );
    lx += 24 + label.length * 6.2;
    if (lx > WIDTH - 160) {
      lx = LEFT;
      y += 16;
    }
  }
  y += 14;

  return `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${y}" viewBox="0 0 ${WIDTH} ${y}" font-family="sans-serif">\n<rect width="100%" height="100%" fill="white"/>\n${out.join("\n")}\n</svg>\n`;
}
