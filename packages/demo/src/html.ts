import type { Scenario } from "./scenarios/index.js";
import type { RunRecord } from "./scenarios/context.js";
import { escapeXml as esc } from "./xml.js";

export interface Picture {
  readonly run: RunRecord;
  /** File name of the SVG, relative to the page. */
  readonly file: string;
}

/** One page with every picture, grouped by scenario, each scenario introduced in a sentence or two. */
export function renderHtml(
  scenarios: readonly Scenario[],
  pictures: readonly Picture[],
  meta: { readonly servers: readonly string[]; readonly when: Date; readonly ok: boolean },
): string {
  const sections = scenarios.map((s) => {
    const figures = pictures
      .filter((p) => p.run.scenario === s.name)
      .map((p) => {
        const v = p.run.verdict;
        const tag = v.ok
          ? `<span class="ok">${esc(v.observed)}, as expected</span>`
          : `<span class="bad">${esc(v.observed)}, expected ${esc(v.expected)}</span>`;
        return `<figure id="${esc(p.file.replace(/\.svg$/, ""))}"><figcaption>${esc(p.run.title)} — ${tag}</figcaption><img src="${esc(encodeURI(p.file))}" alt="${esc(`${p.run.title}: ${v.summary}`)}"></figure>`;
      });
    if (figures.length === 0) return "";
    return `<section><h2>${esc(s.name)}</h2><p>${esc(s.summary)}</p>${figures.join("\n")}</section>`;
  });
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>fenced demo — leases, pauses and fencing tokens</title>
<style>
  body { font-family: 'DejaVu Sans', Verdana, Helvetica, Arial, sans-serif; margin: 24px auto; max-width: 1400px; padding: 0 16px; color: #212121; }
  h1 { font-size: 24px; margin-bottom: 4px; }
  h2 { font-size: 20px; margin-top: 36px; border-bottom: 2px solid #e0e0e0; padding-bottom: 4px; }
  p, li { font-size: 14px; line-height: 1.5; }
  figure { margin: 18px 0 28px; }
  figcaption { font-size: 14px; font-weight: bold; margin-bottom: 6px; }
  img { width: 100%; height: auto; border: 1px solid #e0e0e0; border-radius: 6px; }
  .ok { color: #2e7d32; }
  .bad { color: #c62828; }
  .meta { color: #616161; font-size: 13px; }
</style>
</head>
<body>
<h1>Leases, pauses and fencing tokens — live</h1>
<p>The failures from Martin Kleppmann's “How to do distributed locking”, replayed against real servers.
Unfenced runs use a plain PutObject / UPDATE: the anomaly shows. Fenced runs send the lease's token to
FencedS3 / FencedPostgres, which refuse any token lower than the highest they have accepted.
Overall: <strong class="${meta.ok ? "ok" : "bad"}">${meta.ok ? "every run showed what it should" : "some runs did not show what they should"}</strong>.</p>
<p class="meta">Run ${esc(meta.when.toISOString())}. Servers:</p>
<ul class="meta">${meta.servers.map((s) => `<li>${esc(s)}</li>`).join("")}</ul>
${sections.join("\n")}
</body>
</html>
`;
}
