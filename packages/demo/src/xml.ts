/**
 * Text that goes into SVG/HTML: labels and messages carry server error messages, keys and
 * versions, so every one is escaped, and characters XML 1.0 cannot hold at all are dropped.
 */
export function escapeXml(text: string): string {
  return (
    text
      // eslint-disable-next-line no-control-regex
      .replace(/[\u0000-\u0008\u000b\u000c\u000e-\u001f\ufffe\uffff]/g, "")
      // Lone surrogates are not characters: an XML parser refuses them.
      .replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, "")
      .replace(/&/g, "&amp;")
      .replace(/</g, "&lt;")
      .replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;")
      .replace(/'/g, "&apos;")
  );
}

/**
 * Estimated width of a line of text at the given font size. Browsers lay out the real glyphs; the
 * diagram only needs enough to keep labels apart, so this errs wide (DejaVu Sans is a wide face).
 */
export function textWidth(text: string, size: number, bold = false): number {
  let units = 0;
  for (const ch of text) {
    if (/[iIl.,:;'|!() ]/.test(ch)) units += 0.32;
    else if (/[MWmw@]/.test(ch)) units += 0.9;
    else if (/[A-Z0-9]/.test(ch)) units += 0.68;
    else if (ch.codePointAt(0)! > 0x2000) units += 1;
    else units += 0.6;
  }
  return units * size * (bold ? 1.12 : 1);
}

/** Greedy word wrap to a pixel width (by the same estimate); a word longer than the line gets its own. */
export function wrap(text: string, maxWidth: number, size: number, bold = false): string[] {
  const lines: string[] = [];
  let line = "";
  for (const word of text.split(/\s+/).filter((w) => w !== "")) {
    const candidate = line === "" ? word : `${line} ${word}`;
    if (line !== "" && textWidth(candidate, size, bold) > maxWidth) {
      lines.push(line);
      line = word;
    } else line = candidate;
  }
  if (line !== "") lines.push(line);
  return lines.length === 0 ? [""] : lines;
}
