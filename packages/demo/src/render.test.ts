import { XMLParser, XMLValidator } from "fast-xml-parser";
import { describe, expect, it } from "vitest";
import { renderHtml } from "./html.js";
import { judge } from "./judge.js";
import type { RunRecord } from "./scenarios/context.js";
import { SCENARIO_LIST } from "./scenarios/index.js";
import { renderSvg } from "./svg.js";
import type { DemoEvent } from "./timeline.js";

const HOSTILE = `<script>alert("x")</script> & 'quotes' ]]> \u0001\u0007 \ud800 end`;
/** What an XML parser gives back for HOSTILE: everything but the characters XML cannot hold. */
const HOSTILE_READ = `<script>alert("x")</script> & 'quotes' ]]>   end`;

function event(seq: number, fields: Partial<DemoEvent>): DemoEvent {
  return {
    id: `gc-pause/s3/unfenced#${seq}`,
    seq,
    t: seq * 10,
    kind: "setup",
    lane: "storage",
    label: `label ${seq}`,
    message: `message ${seq}`,
    ...fields,
  };
}

const run: RunRecord = {
  scenario: "gc-pause",
  backend: "s3",
  mode: "unfenced",
  title: `title ${HOSTILE}`,
  caption: `caption ${HOSTILE}`,
  lanes: [
    { id: "client-1", title: `client ${HOSTILE}`, kind: "client", client: 1 },
    { id: "lock", title: "lock", kind: "lock" },
    { id: "storage", title: "storage", kind: "storage" },
  ],
  events: [
    event(1, { label: HOSTILE, message: `first ${HOSTILE}` }),
    event(2, { kind: "acquire", lane: "lock", to: "client-1", token: "33" }),
    event(3, {
      kind: "write",
      lane: "client-1",
      to: "storage",
      outcome: "refused",
      refusal: { error: "StaleTokenError", message: HOSTILE, token: "33", highest: "34" },
    }),
    event(4, { kind: "final", lost: ["client 2"] }),
  ],
  spans: [{ lane: "client-1", kind: "lease", label: `lease ${HOSTILE}`, client: 1, fromSeq: 2, toSeq: undefined }],
  verdict: judge({ expected: "anomaly", writes: [], final: { entries: [HOSTILE] }, preconditions: [] }),
};

describe("renderSvg", () => {
  it("escapes every piece of text, so hostile labels still give well-formed XML that reads back unchanged", () => {
    const svg = renderSvg(run);
    expect(XMLValidator.validate(svg)).toBe(true);
    expect(svg).not.toContain("<script>");
    const parsed = new XMLParser({ ignoreAttributes: false, parseTagValue: false, trimValues: false }).parse(svg) as Record<
      string,
      unknown
    >;
    const texts = JSON.stringify(parsed);
    expect(texts).toContain(JSON.stringify(HOSTILE_READ).slice(1, -1));
    expect(texts).toContain(JSON.stringify(`first ${HOSTILE_READ}`).slice(1, -1));
  });

  it("marks each event with its id and draws refused writes apart from accepted ones", () => {
    const svg = renderSvg(run);
    for (const e of run.events) expect(svg).toContain(`data-event="${e.id}"`);
    expect(svg).toMatch(/data-outcome="refused"[^>]*>.*✗/s);
    expect(svg).not.toContain('data-outcome="accepted"');
  });
});

describe("renderHtml", () => {
  it("escapes file names and text, and links every picture", () => {
    const html = renderHtml(SCENARIO_LIST, [{ run, file: `a"b<c.svg` }], { servers: [HOSTILE], when: new Date(0), ok: true });
    expect(html).not.toContain("<script>");
    expect(html).toContain(`src="a%22b%3Cc.svg"`);
  });
});

describe("judge", () => {
  const accepted = { accepted: true as const, version: undefined };
  const stale = { accepted: false as const, refusal: { error: "StaleTokenError" as const, message: "", token: "33", highest: "34" } };

  it("an acknowledged write missing from the file is the anomaly", () => {
    const v = judge({
      expected: "anomaly",
      writes: [
        { client: "client 2", entry: "c2", outcome: accepted },
        { client: "client 1", entry: "c1", outcome: accepted },
      ],
      final: { entries: ["c1"] },
      preconditions: [],
    });
    expect(v).toMatchObject({ observed: "anomaly", ok: true, lost: ["client 2"] });
  });

  it("a fenced run in which the stale write got through fails", () => {
    const v = judge({
      expected: "protected",
      writes: [
        { client: "client 2", entry: "c2", outcome: accepted },
        { client: "client 1", entry: "c1", outcome: accepted },
      ],
      final: { entries: ["c1"] },
      mustRefuse: { client: "client 1", error: "StaleTokenError" },
      preconditions: [],
    });
    expect(v.ok).toBe(false);
    expect(v.failures.join()).toMatch(/expected protected, observed anomaly/);
  });

  it("a protected run needs the right client refused for the right reason, and its preconditions", () => {
    const writes = [
      { client: "client 2", entry: "c2", outcome: accepted },
      { client: "client 1", entry: "c1", outcome: stale },
    ];
    expect(
      judge({
        expected: "protected",
        writes,
        final: { entries: ["c2"] },
        mustRefuse: { client: "client 1", error: "StaleTokenError" },
        preconditions: [],
      }).ok,
    ).toBe(true);
    expect(
      judge({
        expected: "protected",
        writes,
        final: { entries: ["c2"] },
        mustRefuse: { client: "client 2", error: "StaleTokenError" },
        preconditions: [],
      }).ok,
    ).toBe(false);
    const equal = [{ client: "client 1", entry: "c1", outcome: { ...stale, refusal: { ...stale.refusal, highest: "33" } } }];
    expect(
      judge({
        expected: "protected",
        writes: equal,
        final: { entries: [] },
        mustRefuse: { client: "client 1", error: "StaleTokenError" },
        preconditions: [],
      }).ok,
    ).toBe(false);
    expect(
      judge({ expected: "protected", writes, final: { entries: ["c2"] }, preconditions: [{ what: "lease expired", holds: false }] })
        .failures,
    ).toEqual(["precondition failed: lease expired"]);
  });
});
