import type { RunRecord } from "./scenarios/context.js";
import type { DemoEvent, Lane, Span } from "./timeline.js";
import { escapeXml as esc, textWidth, wrap } from "./xml.js";

/*
 * One picture per run, in the manner of the article's diagrams: a lane per client, per lock node
 * (or one for the lock service) and one for the storage; time runs left to right. Events are evenly
 * spaced rather than to scale — a one-second pause would otherwise squeeze everything else into a
 * corner — and the axis gives each event's real time. Every event carries a number that the list
 * under the diagram explains in full.
 */

const FONT = "'DejaVu Sans', Verdana, Helvetica, Arial, sans-serif";
const TARGET_WIDTH = 1320;
const LEFT = 170;
const RIGHT = 70;
const MIN_STEP = 76;
const ROW = 18;
const LABEL = 12;
const BADGE = 16;
const C = {
  1: "#1565c0",
  2: "#8e24aa",
  ok: "#2e7d32",
  bad: "#c62828",
  grey: "#757575",
  line: "#9e9e9e",
  text: "#212121",
  amber: "#e65100",
} as const;
const TINT = { 1: "#d6e6fa", 2: "#ecd9f2" } as const;

type Side = "above" | "below";
interface Placed {
  readonly event: DemoEvent;
  readonly lane: string;
  readonly side: Side;
  readonly row: number;
  readonly x0: number;
  readonly width: number;
}

/** Rows of labels beside one lane line: each label takes the first row where it overlaps nothing. */
class RowPacker {
  private readonly rows: [number, number][][] = [];
  place(x0: number, x1: number): number {
    for (let r = 0; ; r++) {
      const row = (this.rows[r] ??= []);
      if (row.every(([a, b]) => x1 + 8 <= a || x0 >= b + 8)) {
        row.push([x0, x1]);
        return r;
      }
    }
  }
  get count(): number {
    return this.rows.length;
  }
}

function core(lane: Lane): number {
  return lane.kind === "node" ? 22 : 34;
}

function clientColor(n: 1 | 2 | undefined): string {
  return n === undefined ? C.grey : C[n];
}

/** Which lane an event's label sits by, and on which side: away from where its arrow comes from. */
function anchor(e: DemoEvent, lanes: readonly Lane[], index: Map<string, number>): { lane: string; side: Side } {
  // Arrows reach the storage lane from above: its own labels go underneath, out of their way.
  if (e.to === undefined) return { lane: e.lane, side: lanes.find((l) => l.id === e.lane)?.kind === "storage" ? "below" : "above" };
  const onTarget = e.kind === "acquire" || e.kind === "read" || e.kind === "write" || e.kind === "register";
  const lane = onTarget ? e.to : e.lane;
  const other = onTarget ? e.lane : e.to;
  return { lane, side: (index.get(other) ?? 0) < (index.get(lane) ?? 0) ? "below" : "above" };
}

export function renderSvg(run: RunRecord): string {
  const { events, lanes, spans, verdict } = run;
  const index = new Map(lanes.map((l, i) => [l.id, i]));
  const n = Math.max(events.length, 1);
  const step = Math.max(MIN_STEP, (TARGET_WIDTH - LEFT - RIGHT - 40) / Math.max(n - 1, 1));
  const width = Math.round(LEFT + 40 + step * (n - 1) + RIGHT);
  const xOf = (seq: number): number => LEFT + 40 + step * (seq - 1);
  const endX = width - 18;

  // Labels first: they decide how tall each lane must be.
  const packers = new Map<string, RowPacker>();
  const placed: Placed[] = events.map((event) => {
    const { lane, side } = anchor(event, lanes, index);
    const w = BADGE + 5 + textWidth(event.label, LABEL, true);
    const x0 = Math.min(Math.max(xOf(event.seq) - w / 2, LEFT + 4), width - 6 - w);
    const key = `${lane}/${side}`;
    const packer = packers.get(key) ?? new RowPacker();
    packers.set(key, packer);
    return { event, lane, side, row: packer.place(x0, x0 + w), x0, width: w };
  });

  // Header: title, caption, verdict.
  const out: string[] = [];
  let y = 30;
  out.push(`<text x="20" y="${y}" font-size="19" font-weight="bold" fill="${C.text}">${esc(run.title)}</text>`);
  y += 22;
  out.push(`<text x="20" y="${y}" font-size="13" fill="#424242">${esc(run.caption)}</text>`);
  y += 14;
  const tone = verdict.observed === "anomaly" ? C.bad : verdict.observed === "protected" ? C.ok : C.amber;
  const head = verdict.observed === "anomaly" ? "ANOMALY" : verdict.observed === "protected" ? "PROTECTED" : "INCONCLUSIVE";
  const expectation = verdict.ok ? `as expected (${verdict.expected})` : `NOT as expected: ${verdict.failures.join("; ")}`;
  const vlines = wrap(`${head}: ${verdict.summary} — ${expectation}`, width - 70, 13, true);
  out.push(
    `<rect x="20" y="${y}" width="${width - 40}" height="${vlines.length * 18 + 12}" rx="6" fill="${tone}" fill-opacity="0.09" stroke="${tone}" stroke-width="1.5"/>`,
  );
  vlines.forEach((line, i) =>
    out.push(
      `<text x="32" y="${y + 21 + i * 18}" font-size="13" fill="${tone}"${i === 0 ? ' font-weight="bold"' : ""}>${esc(line)}</text>`,
    ),
  );
  y += vlines.length * 18 + 12 + 18;

  // Lanes: label rows above, the line with its bars, label rows below.
  const lineY = new Map<string, number>();
  const laneTop = new Map<string, number>();
  for (const lane of lanes) {
    const above = packers.get(`${lane.id}/above`)?.count ?? 0;
    const below = packers.get(`${lane.id}/below`)?.count ?? 0;
    laneTop.set(lane.id, y);
    const line = y + 8 + above * ROW + core(lane) / 2;
    lineY.set(lane.id, line);
    y = line + core(lane) / 2 + below * ROW + 8;
  }
  const lanesBottom = y;
  const body: string[] = [];
  lanes.forEach((lane, i) => {
    const top = laneTop.get(lane.id) ?? 0;
    const bottom = lanes[i + 1] === undefined ? lanesBottom : (laneTop.get(lanes[i + 1]!.id) ?? lanesBottom);
    const ly = lineY.get(lane.id) ?? 0;
    if (i % 2 === 0) body.push(`<rect x="0" y="${top}" width="${width}" height="${bottom - top}" fill="#f7f7f7"/>`);
    const title = lane.kind === "node" ? 12 : 14;
    body.push(
      `<text x="16" y="${ly + 5}" font-size="${title}" font-weight="bold" fill="${clientColor(lane.client)}">${esc(lane.title)}</text>`,
    );
    body.push(`<line x1="${LEFT}" y1="${ly}" x2="${endX}" y2="${ly}" stroke="${C.line}" stroke-width="1"/>`);
  });

  // Pauses and partitions are the background; the leases that run out during them go on top.
  const behind = (s: Span): number => (s.kind === "pause" || s.kind === "cut-off" ? 0 : 1);
  for (const span of [...spans].sort((a, b) => behind(a) - behind(b))) body.push(drawSpan(span, lanes, lineY, xOf, endX));
  for (const p of placed) body.push(drawEvent(p, lanes, lineY, xOf));

  // Time axis: the real time of every event.
  y = lanesBottom + 18;
  body.push(`<text x="16" y="${y + 4}" font-size="11" fill="${C.grey}">ms since start</text>`);
  for (const e of events) {
    const x = xOf(e.seq);
    body.push(`<line x1="${x}" y1="${lanesBottom}" x2="${x}" y2="${y - 9}" stroke="${C.line}"/>`);
    body.push(`<text x="${x}" y="${y + 4}" font-size="11" text-anchor="middle" fill="${C.grey}">${e.t}</text>`);
  }
  body.push(`<text x="${endX}" y="${y + 20}" font-size="10" text-anchor="end" fill="${C.grey}">events evenly spaced, not to scale</text>`);

  // The full story, one numbered line per event.
  y += 40;
  body.push(`<text x="20" y="${y}" font-size="13" font-weight="bold" fill="${C.text}">What happened</text>`);
  y += 8;
  for (const e of events) {
    const lines = wrap(e.message, width - 150, 12);
    y += 18;
    const tint = e.outcome === "refused" || (e.lost?.length ?? 0) > 0 ? C.bad : e.outcome === "accepted" ? C.ok : C.text;
    body.push(
      `<g data-legend="${esc(e.id)}">${badge(30, y - 4, e.seq)}<text x="44" y="${y}" font-size="12" fill="${C.grey}">${e.t} ms</text>`,
    );
    lines.forEach((line, i) => body.push(`<text x="104" y="${y + i * 16}" font-size="12" fill="${tint}">${esc(line)}</text>`));
    body.push(`</g>`);
    y += (lines.length - 1) * 16;
  }
  const height = Math.round(y + 24);

  return [
    `<?xml version="1.0" encoding="UTF-8"?>`,
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="${esc(FONT)}" data-run="${esc(`${run.scenario}/${run.backend}/${run.mode}`)}">`,
    `<title>${esc(`${run.title}: ${verdict.summary}`)}</title>`,
    defs(),
    `<rect width="${width}" height="${height}" fill="#ffffff"/>`,
    ...out,
    ...body,
    `</svg>`,
    "",
  ].join("\n");
}

function defs(): string {
  const arrow = (id: string, color: string): string =>
    `<marker id="${id}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" markerHeight="8" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="${color}"/></marker>`;
  return [
    "<defs>",
    arrow("a-1", C[1]),
    arrow("a-2", C[2]),
    arrow("a-grey", C.grey),
    `<pattern id="hatch" width="7" height="7" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="7" height="7" fill="#eeeeee"/><line x1="0" y1="0" x2="0" y2="7" stroke="#8d8d8d" stroke-width="3"/></pattern>`,
    `<pattern id="hatch-light" width="7" height="7" patternUnits="userSpaceOnUse" patternTransform="rotate(-45)"><rect width="7" height="7" fill="#fafafa"/><line x1="0" y1="0" x2="0" y2="7" stroke="#d0d0d0" stroke-width="2"/></pattern>`,
    "</defs>",
  ].join("");
}

function badge(x: number, y: number, seq: number): string {
  return `<circle cx="${x}" cy="${y}" r="8" fill="#37474f"/><text x="${x}" y="${y + 3.5}" font-size="10" font-weight="bold" text-anchor="middle" fill="#ffffff">${seq}</text>`;
}

/** Text over lines and bars stays readable with a white halo behind it. */
function halo(x: number, y: number, text: string, attrs: string): string {
  return `<text x="${x}" y="${y}" ${attrs} stroke="#ffffff" stroke-width="3.5" paint-order="stroke" stroke-linejoin="round">${esc(text)}</text>`;
}

function drawSpan(span: Span, lanes: readonly Lane[], lineY: Map<string, number>, xOf: (seq: number) => number, endX: number): string {
  const lane = lanes.find((l) => l.id === span.lane);
  const ly = lineY.get(span.lane);
  if (lane === undefined || ly === undefined) return "";
  const x0 = xOf(span.fromSeq);
  const x1 = span.toSeq === undefined ? endX : xOf(span.toSeq);
  const w = Math.max(x1 - x0, 2);
  const attrs = `data-span="${esc(span.kind)}"`;
  if (span.kind === "pause") {
    const h = core(lane) + 6;
    const label =
      textWidth("stopped", 11) + 8 < w
        ? halo(x0 + w / 2, ly + 4, "stopped", `font-size="11" font-weight="bold" text-anchor="middle" fill="#424242"`)
        : "";
    return `<g ${attrs}><rect x="${x0}" y="${ly - h / 2}" width="${w}" height="${h}" fill="url(#hatch)" fill-opacity="0.85" stroke="#616161"/>${label}</g>`;
  }
  if (span.kind === "cut-off") {
    const h = core(lane) - 6;
    const label = textWidth(span.label, 10) + 8 < w ? halo(x0 + 6, ly + 3.5, span.label, `font-size="10" fill="#616161"`) : "";
    return `<g ${attrs}><rect x="${x0}" y="${ly - h / 2}" width="${w}" height="${h}" fill="url(#hatch-light)" stroke="#bdbdbd"/>${label}</g>`;
  }
  const n = span.client ?? 1;
  const h = lane.kind === "node" ? 14 : 18;
  const size = lane.kind === "node" ? 10 : 11;
  const text =
    textWidth(span.label, size, true) + 10 < w
      ? span.label
      : textWidth(span.label.replace(/^.*· /, ""), size, true) + 8 < w
        ? span.label.replace(/^.*· /, "")
        : "";
  const label =
    text === ""
      ? ""
      : `<text x="${x0 + 6}" y="${ly + size / 2 - 1}" font-size="${size}" font-weight="bold" fill="${C[n]}">${esc(text)}</text>`;
  const open = span.toSeq === undefined ? `<text x="${x1 + 3}" y="${ly + 4}" font-size="11" fill="${C[n]}">…</text>` : "";
  return `<g ${attrs}><rect x="${x0}" y="${ly - h / 2}" width="${w}" height="${h}" rx="4" fill="${TINT[n]}" stroke="${C[n]}" stroke-width="1.2"/>${label}${open}</g>`;
}

function drawEvent(p: Placed, lanes: readonly Lane[], lineY: Map<string, number>, xOf: (seq: number) => number): string {
  const e = p.event;
  const x = xOf(e.seq);
  const parts: string[] = [];
  const from = lineY.get(e.lane) ?? 0;
  const laneOf = (id: string): Lane | undefined => lanes.find((l) => l.id === id);

  if (e.to !== undefined) {
    const to = lineY.get(e.to) ?? 0;
    const down = to > from;
    const fromLane = laneOf(e.lane);
    const toLane = laneOf(e.to);
    const y0 = from + (down ? 1 : -1) * ((fromLane === undefined ? 0 : core(fromLane)) / 2 - 6);
    const outcome = e.outcome !== undefined && (e.kind === "write" || e.kind === "register");
    const y1 = to - (down ? 1 : -1) * (outcome ? 10 : (toLane === undefined ? 0 : core(toLane)) / 2 - 8);
    const client = (e.lane.startsWith("client-") ? e.lane : e.to).endsWith("2") ? 2 : 1;
    let stroke: string = C[client];
    let dash = "";
    let head = `a-${client}`;
    if (e.kind === "read" || e.kind === "release") [stroke, dash, head] = [C.grey, ' stroke-dasharray="5 4"', "a-grey"];
    if (e.kind === "register") dash = ' stroke-dasharray="7 3"';
    if (e.kind === "both-hold") {
      parts.push(
        `<line x1="${x}" y1="${from - 14}" x2="${x}" y2="${to + 14}" stroke="${C.amber}" stroke-width="2" stroke-dasharray="3 4"/>`,
      );
    } else {
      parts.push(
        `<line x1="${x - 6}" y1="${y0}" x2="${x + 6}" y2="${y1}" stroke="${stroke}" stroke-width="1.8"${dash} marker-end="url(#${head})"/>`,
      );
    }
    if (outcome) {
      const good = e.outcome === "accepted";
      parts.push(`<circle cx="${x + 6}" cy="${to}" r="9" fill="${good ? C.ok : C.bad}"/>`);
      parts.push(
        `<text x="${x + 6}" y="${to + 4.5}" font-size="12" font-weight="bold" text-anchor="middle" fill="#ffffff">${good ? "✓" : "✗"}</text>`,
      );
    }
  } else {
    parts.push(pointMarker(e, x, from));
  }

  // The label with its number, by its lane.
  const ly = lineY.get(p.lane) ?? 0;
  const lane = laneOf(p.lane);
  const half = (lane === undefined ? 0 : core(lane)) / 2;
  const baseline = p.side === "above" ? ly - half - 7 - p.row * ROW : ly + half + 15 + p.row * ROW;
  const alarm = e.kind === "expire" || (e.lost !== undefined && e.lost.length > 0);
  const color = e.outcome === "refused" || alarm ? C.bad : e.outcome === "accepted" ? C.ok : C.text;
  const weight = e.outcome !== undefined || alarm ? ' font-weight="bold"' : "";
  parts.push(badge(p.x0 + 8, baseline - 4, e.seq));
  parts.push(halo(p.x0 + BADGE + 4, baseline, e.label, `font-size="${LABEL}"${weight} fill="${color}" data-label="true"`));
  const data = `data-event="${esc(e.id)}" data-kind="${esc(e.kind)}"${e.outcome === undefined ? "" : ` data-outcome="${e.outcome}"`}`;
  return `<g ${data}>${parts.join("")}</g>`;
}

function pointMarker(e: DemoEvent, x: number, y: number): string {
  switch (e.kind) {
    case "expire":
      return `<path d="M${x - 6},${y - 6} L${x + 6},${y + 6} M${x + 6},${y - 6} L${x - 6},${y + 6}" stroke="${C.bad}" stroke-width="3"/>`;
    case "pause":
      return `<rect x="${x - 6}" y="${y - 7}" width="4" height="14" fill="#424242"/><rect x="${x + 2}" y="${y - 7}" width="4" height="14" fill="#424242"/>`;
    case "resume":
      return `<path d="M${x - 5},${y - 7} L${x + 7},${y} L${x - 5},${y + 7} z" fill="#424242"/>`;
    case "partition":
      return `<circle cx="${x}" cy="${y}" r="7" fill="#ffffff" stroke="${C.grey}" stroke-width="2"/><path d="M${x - 5},${y + 5} L${x + 5},${y - 5}" stroke="${C.grey}" stroke-width="2"/>`;
    case "clock-jump":
      return `<circle cx="${x}" cy="${y}" r="9" fill="#fff3e0" stroke="${C.amber}" stroke-width="2"/><path d="M${x},${y} L${x},${y - 6} M${x},${y} L${x + 5},${y + 2}" stroke="${C.amber}" stroke-width="2"/>`;
    case "setup":
    case "final":
      return `<path d="M${x - 6},${y - 8} h8 l4,4 v12 h-12 z" fill="#ffffff" stroke="#424242" stroke-width="1.5"/>`;
    default:
      return `<circle cx="${x}" cy="${y}" r="5" fill="${C.grey}"/>`;
  }
}
