import type { S3SweepProgress, S3SweepReport } from "@fenced/store/internal";

/**
 * What `fenced-gateway sweep` writes on stderr while S3 is swept: one line when a phase begins and
 * then at most one a second (a large bucket has thousands of pages), and one when it is done.
 */
export function sweepLines(line: (text: string) => void): {
  progress: (progress: S3SweepProgress) => void;
  done: (report: S3SweepReport) => void;
} {
  let phase: string | undefined;
  let last = 0;
  return {
    progress(progress) {
      const now = Date.now();
      if (progress.phase === phase && now - last < 1_000) return;
      phase = progress.phase;
      last = now;
      line(`S3: ${progress.phase}: ${progress.pages} page${progress.pages === 1 ? "" : "s"}, ${summary(progress)}`);
    },
    done: (report) => line(`S3: done: ${summary(report)}`),
  };
}

function summary(r: S3SweepReport): string {
  const gone = r.dryRun ? "would delete" : "deleted";
  const aborted = r.dryRun ? "would abort" : "aborted";
  const kept = r.uploads.kept;
  return (
    `${r.scanned.objects} objects scanned (${bytes(r.scanned.bytes)}), ${gone} ${r.deleted.objects} (${bytes(r.deleted.bytes)}), ` +
    `kept ${r.kept.objects} (named ${r.keptBecause.named.objects}, younger than ${r.minAgeMs} ms ${r.keptBecause.young.objects}, ` +
    `unrecognised ${r.keptBecause.unrecognised.objects}); multipart uploads: ${r.uploads.scanned} found, ${aborted} ${r.uploads.aborted}, ` +
    `kept (named ${kept.named}, younger ${kept.young}, unrecognised ${kept.unrecognised})`
  );
}

function bytes(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return unit === 0 ? `${n} B` : `${value.toFixed(1)} ${units[unit] ?? ""}`;
}
