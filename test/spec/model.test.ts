// The protocol's models (spec/*.pml), checked exhaustively with SPIN: for every configuration, spin
// writes the verifier (pan.c), gcc compiles it, and pan searches every state. The protocol as built
// must hold with a complete search; every mutant (one rule removed) must give a counterexample, whose
// trail is replayed and printed. A missing spin or gcc fails the file, saying what to install; it is
// never skipped. Each configuration prints one JSON line: states stored, transitions, depth, seconds.
import { execFile, spawnSync } from "node:child_process";
import { copyFile, mkdtemp, rm, stat } from "node:fs/promises";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const SPEC = fileURLToPath(new URL("../../spec/", import.meta.url));

type Model = "lock" | "store" | "gateway";

interface Configuration {
  readonly name: string;
  readonly model: Model;
  readonly defines: readonly string[];
  /** "holds": no error in a complete search; otherwise the invariant whose assertion must fail. */
  readonly expect: "holds" | { readonly violates: string };
  /** Millions of states: compile the verifier optimised, and give it a hash table of 2^hashBits slots (pan grows it when it fills). */
  readonly large?: { readonly hashBits: number };
}

// Names as in PROTOCOL.md. Bounds: spec/README.md and PROTOCOL.md, next to each argument.
const CONFIGURATIONS: readonly Configuration[] = [
  // The lock: two clients followed through acquire/publish/release, plus one script of another client.
  { name: "lock, counters kept", model: "lock", defines: ["-DOTHERS=1"], expect: "holds", large: { hashBits: 23 } },
  // Three clients followed: each sends to the nodes in one order, and every reply arrives.
  {
    name: "lock, counters kept, three clients",
    model: "lock",
    defines: ["-DCLIENTS=3", "-DFIXED_ORDER", "-DNO_LOST_REPLIES"],
    expect: "holds",
    large: { hashBits: 24 },
  },
  {
    name: "lock, counters lost: the stores keep one lease per token",
    model: "lock",
    defines: ["-DCOUNTER_LOSS"],
    expect: "holds",
    large: { hashBits: 21 },
  },
  {
    name: "lock, counters lost: tokens repeat",
    model: "lock",
    defines: ["-DCOUNTER_LOSS", "-DASSERT_LOCK_AFTER_LOSS", "-DONLY_CHECK=TOKENS_UNIQUE"],
    expect: { violates: "tokens_unique" },
  },
  {
    name: "lock, counters lost: tokens go back",
    model: "lock",
    defines: ["-DCOUNTER_LOSS", "-DASSERT_LOCK_AFTER_LOSS", "-DONLY_CHECK=TOKENS_INCREASE"],
    expect: { violates: "tokens_increase" },
  },
  {
    name: "mutant: publish counts nodes it did not move",
    model: "lock",
    defines: ["-DMUTANT_PUBLISH_COUNTS_UNMOVED", "-DONLY_CHECK=TOKENS_UNIQUE"],
    expect: { violates: "tokens_unique" },
  },
  {
    name: "mutant: publish counts nodes it did not move, yet the stores keep one lease per token",
    model: "lock",
    defines: ["-DMUTANT_PUBLISH_COUNTS_UNMOVED", "-DONLY_CHECK=ONE_LEASE_PER_TOKEN"],
    expect: "holds",
  },
  {
    name: "mutant: equal tokens accepted from any holder (lock with counters lost)",
    model: "lock",
    defines: ["-DCOUNTER_LOSS", "-DMUTANT_EQUAL_TOKEN_ANY_HOLDER", "-DONLY_CHECK=ONE_LEASE_PER_TOKEN"],
    expect: { violates: "one_lease_per_token" },
  },

  // The stores: any fences (tokens repeat across leases), two resources, two keys.
  { name: "PostgreSQL store, ownership", model: "store", defines: ["-DOPS=3"], expect: "holds", large: { hashBits: 22 } },
  { name: "S3 store, ownership", model: "store", defines: ["-DS3", "-DOPS=3"], expect: "holds", large: { hashBits: 23 } },
  {
    name: "S3 store: across the keys of a resource, the window",
    model: "store",
    defines: ["-DS3", "-DACROSS_KEYS", "-DOPS=3", "-DONLY_CHECK=RATCHET"],
    expect: { violates: "ratchet" },
  },
  { name: "PostgreSQL store, updates with register and ifVersion", model: "store", defines: ["-DUPDATES"], expect: "holds" },
  { name: "S3 store, updates with register and ifVersion", model: "store", defines: ["-DUPDATES", "-DS3"], expect: "holds" },
  {
    name: "PostgreSQL store, updates by separate leases with register alone",
    model: "store",
    defines: ["-DUPDATES", "-DSEPARATE_LEASES", "-DMUTANT_NO_IFVERSION"],
    expect: "holds",
  },
  {
    name: "S3 store, updates by separate leases with register alone: the window",
    model: "store",
    defines: ["-DUPDATES", "-DSEPARATE_LEASES", "-DMUTANT_NO_IFVERSION", "-DS3"],
    expect: { violates: "no_lost_update" },
  },
  // A write given up on, running at the server at any point after it was sent, then the holder's next write.
  {
    name: "PostgreSQL store, a late commit never overwrites the holder's later write",
    model: "store",
    defines: ["-DLATE_COMMIT"],
    expect: "holds",
  },
  {
    name: "mutant: the put's commit sent with its statement (PostgreSQL)",
    model: "store",
    defines: ["-DLATE_COMMIT", "-DMUTANT_PUT_SYNC_WITH_STATEMENT", "-DONLY_CHECK=NO_LATE_OVERWRITE"],
    expect: { violates: "no_late_overwrite" },
  },
  {
    name: "mutant: a put keeps the record's version (PostgreSQL, late commit)",
    model: "store",
    defines: ["-DLATE_COMMIT", "-DMUTANT_PUT_KEEPS_VERSION", "-DONLY_CHECK=NO_LATE_OVERWRITE"],
    expect: { violates: "no_late_overwrite" },
  },
  {
    name: "mutant: an ordered put lands whatever version the record at its fence has (PostgreSQL, late commit)",
    model: "store",
    defines: ["-DLATE_COMMIT", "-DMUTANT_ORDERED_PUT_NO_CHECK", "-DONLY_CHECK=NO_LATE_OVERWRITE"],
    expect: { violates: "no_late_overwrite" },
  },
  // A lease of two resources: putAll and register under both fences, beside leases of one resource.
  {
    name: "PostgreSQL store, writes under a set of fences land whole or not at all",
    model: "store",
    defines: ["-DSETS", "-DOPS=3"],
    expect: "holds",
    large: { hashBits: 22 },
  },
  {
    name: "mutant: a set of fences admitted by its first ratchet only (PostgreSQL)",
    model: "store",
    defines: ["-DSETS", "-DOPS=3", "-DMUTANT_SET_CHECKS_FIRST_FENCE", "-DONLY_CHECK=SET_WHOLE"],
    expect: { violates: "set_whole" },
  },
  {
    name: "mutant: putAll's records commit one by one (PostgreSQL)",
    model: "store",
    defines: ["-DSETS", "-DOPS=3", "-DMUTANT_SET_NOT_ATOMIC", "-DONLY_CHECK=SET_WHOLE"],
    expect: { violates: "set_whole" },
  },
  // The one-row path (PostgreSQL): a write of its fence's own resource's key checks the record's copy of
  // the fence row (kept by triggers) and writes the record alone, or writes nothing and falls back to
  // today's write. Beside the configurations above, which are the two-row path alone (code before it).
  {
    name: "PostgreSQL store, ownership, with one-row writes of own keys",
    model: "store",
    defines: ["-DONE_ROW", "-DOPS=3"],
    expect: "holds",
    large: { hashBits: 23 },
  },
  {
    name: "PostgreSQL store, updates with register and ifVersion, with one-row writes",
    model: "store",
    defines: ["-DONE_ROW", "-DUPDATES"],
    expect: "holds",
  },
  {
    name: "PostgreSQL store, updates by separate leases with register alone, with one-row writes",
    model: "store",
    defines: ["-DONE_ROW", "-DUPDATES", "-DSEPARATE_LEASES", "-DMUTANT_NO_IFVERSION"],
    expect: "holds",
  },
  {
    name: "PostgreSQL store, a late commit never overwrites the holder's later write, with one-row writes",
    model: "store",
    defines: ["-DONE_ROW", "-DLATE_COMMIT"],
    expect: "holds",
  },
  {
    name: "PostgreSQL store, writes under a set of fences land whole or not at all, with one-row writes beside",
    model: "store",
    defines: ["-DONE_ROW", "-DSETS", "-DOPS=3"],
    expect: "holds",
    large: { hashBits: 22 },
  },
  {
    name: "mutant: the record's copy does not follow the fence row (one-row writes)",
    model: "store",
    defines: ["-DONE_ROW", "-DOPS=3", "-DMUTANT_COPY_NOT_KEPT", "-DONLY_CHECK=RATCHET"],
    expect: { violates: "ratchet" },
  },
  {
    name: "mutant: transfer keeps the record's copy (one-row writes)",
    model: "store",
    defines: ["-DONE_ROW", "-DOPS=3", "-DMUTANT_TRANSFER_KEEPS_COPY", "-DONLY_CHECK=ONE_RESOURCE_PER_KEY"],
    expect: { violates: "one_resource_per_key" },
  },
  {
    name: "mutant: the one-row write checks the copy's token, not its holder",
    model: "store",
    defines: ["-DONE_ROW", "-DOPS=3", "-DMUTANT_ONE_ROW_ANY_HOLDER", "-DONLY_CHECK=ONE_LEASE_PER_TOKEN"],
    expect: { violates: "one_lease_per_token" },
  },
  {
    name: "mutant: a one-row ordered put lands whatever version the record at its fence has (late commit)",
    model: "store",
    defines: ["-DONE_ROW", "-DLATE_COMMIT", "-DMUTANT_ONE_ROW_NO_ORDER_CHECK", "-DONLY_CHECK=NO_LATE_OVERWRITE"],
    expect: { violates: "no_late_overwrite" },
  },
  {
    name: "mutant: equal tokens accepted from any holder (PostgreSQL)",
    model: "store",
    defines: ["-DOPS=3", "-DMUTANT_EQUAL_TOKEN_ANY_HOLDER", "-DONLY_CHECK=ONE_LEASE_PER_TOKEN"],
    expect: { violates: "one_lease_per_token" },
  },
  {
    name: "mutant: equal tokens accepted from any holder (S3)",
    model: "store",
    defines: ["-DS3", "-DOPS=3", "-DMUTANT_EQUAL_TOKEN_ANY_HOLDER", "-DONLY_CHECK=ONE_LEASE_PER_TOKEN"],
    expect: { violates: "one_lease_per_token" },
  },
  {
    name: "mutant: no owner check (PostgreSQL)",
    model: "store",
    defines: ["-DOPS=3", "-DMUTANT_NO_OWNER_CHECK", "-DONLY_CHECK=ONE_RESOURCE_PER_KEY"],
    expect: { violates: "one_resource_per_key" },
  },
  {
    name: "mutant: no owner check (S3)",
    model: "store",
    defines: ["-DS3", "-DOPS=3", "-DMUTANT_NO_OWNER_CHECK", "-DONLY_CHECK=ONE_RESOURCE_PER_KEY"],
    expect: { violates: "one_resource_per_key" },
  },
  {
    name: "mutant: the ratchet read and written in two steps",
    model: "store",
    defines: ["-DOPS=3", "-DMUTANT_SPLIT_COMPARE", "-DONLY_CHECK=RATCHET"],
    expect: { violates: "ratchet" },
  },
  {
    name: "mutant: transfer skips the to resource's ratchet",
    model: "store",
    defines: ["-DOPS=3", "-DMUTANT_TRANSFER_SKIPS_TO", "-DONLY_CHECK=RATCHET"],
    expect: { violates: "ratchet" },
  },
  {
    name: "mutant: updates without ifVersion (one lease, two updates at once)",
    model: "store",
    defines: ["-DUPDATES", "-DMUTANT_NO_IFVERSION"],
    expect: { violates: "no_lost_update" },
  },
  {
    name: "mutant: updates without ifVersion or register (the ratchet alone)",
    model: "store",
    defines: ["-DUPDATES", "-DSEPARATE_LEASES", "-DMUTANT_NO_IFVERSION", "-DNO_REGISTER"],
    expect: { violates: "no_lost_update" },
  },

  // The gateway: a client sending anything, six requests.
  { name: "gateway trust", model: "gateway", defines: ["-DSTEPS=6"], expect: "holds" },
  {
    name: "mutant: extend signs the client's token",
    model: "gateway",
    defines: ["-DMUTANT_EXTEND_SIGNS_CLIENT_TOKEN"],
    expect: { violates: "lock_issued_only" },
  },
  {
    name: "mutant: plain Fencing-Token from any API key",
    model: "gateway",
    defines: ["-DMUTANT_PLAIN_TOKEN_ANY_KEY"],
    expect: { violates: "lock_issued_only" },
  },
  // Leases of any set of three resources (fl1 ids for one, fl2 for several), five requests.
  { name: "gateway trust, leases of sets", model: "gateway", defines: ["-DSETS", "-DSTEPS=5"], expect: "holds", large: { hashBits: 20 } },
  {
    name: "mutant: an fl2 lease id seals its value only",
    model: "gateway",
    defines: ["-DSETS", "-DMUTANT_SET_ID_SEALS_VALUE_ONLY", "-DONLY_CHECK=ONE_SET_PER_ID"],
    expect: { violates: "one_set_per_id" },
  },
  {
    name: "mutant: a part of a set's lease id is accepted",
    model: "gateway",
    defines: ["-DSETS", "-DMUTANT_SET_ID_ANY_SUBSET", "-DONLY_CHECK=ONE_SET_PER_ID"],
    expect: { violates: "one_set_per_id" },
  },
  {
    name: "mutant: a part of a set's lease id is accepted, yet only fences the lock granted are signed",
    model: "gateway",
    defines: ["-DSETS", "-DSTEPS=5", "-DMUTANT_SET_ID_ANY_SUBSET", "-DONLY_CHECK=LOCK_ISSUED_ONLY"],
    expect: "holds",
    large: { hashBits: 20 },
  },
];

interface Outcome {
  readonly errors: number;
  readonly statesStored: number;
  readonly statesMatched: number;
  readonly transitions: number;
  readonly depth: number;
  readonly seconds: number;
  readonly output: string;
  readonly violated: string | undefined;
  readonly trail: boolean;
  /** The counterexample as replayed by spin -t: its MSC lines, then the failed assertion. */
  readonly counterexample: string[];
}

type Result = { readonly ok: true; readonly outcome: Outcome } | { readonly ok: false; readonly error: Error };

function run(command: string, args: readonly string[], cwd: string): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    execFile(command, args, { cwd, maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${command} ${args.join(" ")} failed: ${err.message}\n${stdout}\n${stderr}`));
      else resolve({ stdout, stderr });
    });
  });
}

function number(output: string, pattern: RegExp): number {
  const m = pattern.exec(output);
  if (m === null) throw new Error(`pan's output has no ${String(pattern)}:\n${output}`);
  return Number(m[1]);
}

let toolsProblem: string | null | undefined;

/** Why the check cannot run here (spin or gcc missing), or null. */
function tools(): string | null {
  if (toolsProblem !== undefined) return toolsProblem;
  const missing = ["spin", "gcc"].filter(
    (tool) => spawnSync(tool, tool === "spin" ? ["-V"] : ["--version"], { stdio: "ignore" }).error !== undefined,
  );
  toolsProblem =
    missing.length === 0
      ? null
      : `${missing.join(" and ")} not found on PATH: the protocol's model check needs the SPIN model checker and a C compiler. ` +
        "Run scripts/bootstrap.sh, or on Debian/Ubuntu: apt-get install spin gcc libc6-dev";
  return toolsProblem;
}

async function check(config: Configuration): Promise<Outcome> {
  const problem = tools();
  if (problem !== null) throw new Error(problem);
  const dir = await mkdtemp(join(tmpdir(), "fenced-spec-"));
  try {
    const source = `${config.model}.pml`;
    await copyFile(join(SPEC, source), join(dir, source));
    const started = performance.now();
    await run("spin", ["-a", ...config.defines, source], dir);
    // A search of millions of states is worth an optimised verifier; for the others (a mutant stops at
    // its first counterexample) compiling would be most of the time.
    const optimise = config.large === undefined ? "-O0" : "-O1";
    await run("gcc", ["-w", optimise, "-DSAFETY", "-DCOLLAPSE", "-DMEMLIM=4096", "-o", "pan", "pan.c"], dir);
    // -m: a depth bound far beyond any run of these models (pan says so if one reaches it).
    const { stdout } = await run("./pan", ["-m100000", `-w${config.large?.hashBits ?? 18}`], dir);
    const seconds = (performance.now() - started) / 1000;
    const trail = await stat(join(dir, `${source}.trail`)).then(
      () => true,
      () => false,
    );
    let counterexample: string[] = [];
    if (trail) {
      const replay = await run("spin", ["-t", ...config.defines, source], dir);
      counterexample = `${replay.stdout}\n${replay.stderr}`
        .split("\n")
        .map((line) => line.trim())
        .filter((line) => line.startsWith("MSC: ") || line.startsWith("spin: text of failed assertion"))
        .map((line) => line.replace(/^MSC: /, ""));
    }
    return {
      errors: number(stdout, /errors: (\d+)/),
      statesStored: number(stdout, /(\d+) states, stored/),
      statesMatched: number(stdout, /(\d+) states, matched/),
      transitions: number(stdout, /(\d+) transitions \(= stored\+matched\)/),
      depth: number(stdout, /depth reached (\d+)/),
      seconds: Math.round(seconds * 100) / 100,
      output: stdout,
      violated: /assertion violated (\w+)/.exec(stdout)?.[1],
      trail,
      counterexample,
    };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

// All configurations start at once, as many at a time as there are cores (at most 2); each test
// waits for its own. Failures are kept as values, so none is an unhandled rejection.
let results: Map<string, Promise<Result>> | undefined;

function resultOf(name: string): Promise<Result> {
  if (results === undefined) {
    const started = new Map<string, Promise<Result>>();
    // The longest searches first, so that the two slots end together.
    const queue = [...CONFIGURATIONS].sort((a, b) => (b.large?.hashBits ?? 0) - (a.large?.hashBits ?? 0));
    const slots = Math.max(1, Math.min(2, availableParallelism()));
    const waiting = new Map<string, (r: Result) => void>();
    for (const c of CONFIGURATIONS) started.set(c.name, new Promise<Result>((resolve) => waiting.set(c.name, resolve)));
    const next = async (): Promise<void> => {
      for (let c = queue.shift(); c !== undefined; c = queue.shift()) {
        const result: Result = await check(c).then(
          (outcome): Result => ({ ok: true, outcome }),
          (error: unknown): Result => ({ ok: false, error: error instanceof Error ? error : new Error(String(error)) }),
        );
        waiting.get(c.name)?.(result);
      }
    };
    for (let i = 0; i < slots; i++) void next();
    results = started;
  }
  const result = results.get(name);
  if (result === undefined) throw new Error(`no configuration ${name}`);
  return result;
}

describe("the protocol's models (SPIN, exhaustive)", () => {
  it("spin and gcc are installed", () => {
    const problem = tools();
    if (problem !== null) throw new Error(problem);
  });

  for (const config of CONFIGURATIONS) {
    it(config.name, { timeout: 300_000 }, async () => {
      const result = await resultOf(config.name);
      if (!result.ok) throw result.error;
      const { outcome } = result;
      const line = {
        model: config.model,
        configuration: config.name,
        defines: config.defines.join(" "),
        errors: outcome.errors,
        statesStored: outcome.statesStored,
        statesMatched: outcome.statesMatched,
        transitions: outcome.transitions,
        depth: outcome.depth,
        seconds: outcome.seconds,
        ...(outcome.violated === undefined ? {} : { violated: outcome.violated }),
      };
      console.log(JSON.stringify(line));
      if (config.expect === "holds") {
        expect(outcome.output, "a complete search").not.toMatch(/search not completed|max search depth too small|out of memory/i);
        expect(outcome.errors, outcome.output).toBe(0);
        expect(outcome.trail).toBe(false);
      } else {
        console.log(`counterexample (${config.name}):\n  ${outcome.counterexample.join("\n  ")}`);
        expect(outcome.errors, outcome.output).toBeGreaterThanOrEqual(1);
        expect(outcome.trail, "pan wrote a trail").toBe(true);
        expect(outcome.violated).toBe(config.expect.violates);
        expect(outcome.counterexample.at(-1)).toContain(config.expect.violates);
      }
    });
  }
});
