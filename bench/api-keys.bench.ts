// What authenticating a request's API key costs as the gateway is given more keys: ApiKeys.authenticate
// with 1, 100 and 1,000 keys configured, each call a request it has not seen (a fresh object, as every
// request is), against the floor every request pays anyway: the SHA-256 of the presented key. In this
// process, on the built gateway, in interleaved rounds; each line the median over rounds of the check's
// nanoseconds, the floor's, and their ratio in the same round, and its ratio to authenticate with one
// key. The goal: a key is found in one step, however many keys there are.
import { hash } from "node:crypto";
import { emit, median, nsPerCall, round3 } from "./measure.js";

const { ApiKeys } = (await import(new URL("../packages/gateway/dist/auth/api-keys.js", import.meta.url).href)) as {
  ApiKeys: new (configs: readonly { id: string; key: string; resources: string[]; keys: string[] }[]) => {
    authenticate(req: { headers: { authorization?: string } }): { id: string };
  };
};

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);
const CALLS = 100_000;
/** Keys configured, per case; the requests present each in turn. */
const SIZES = [1, 100, 1_000] as const;
/** authenticate at the most keys ÷ with one key, in the same round, at most. */
const GOAL_RATIO = 1.25;

const keyOf = (i: number): string => `bench-api-key-${String(i).padStart(6, "0")}-0123456789abcdef`;
const cases = SIZES.map((size) => {
  const configs = Array.from({ length: size }, (_, i) => ({ id: `k${i}`, key: keyOf(i), resources: [""], keys: [""] }));
  const keys = new ApiKeys(configs);
  const headers = configs.map((c) => `Bearer ${c.key}`);
  return { size, keys, headers };
});

const perCase = new Map<number, { ns: number[]; floorNs: number[] }>(SIZES.map((s) => [s, { ns: [], floorNs: [] }]));
for (let round = -1; round < ROUNDS; round++) {
  // Round -1 warms every path; each later round times the cases in another order.
  const order = round < 0 ? cases : [...cases.slice(round % cases.length), ...cases.slice(0, round % cases.length)];
  for (const c of order) {
    const floor = nsPerCall(c.headers, (h) => hash("sha256", h.slice(7), "hex"), CALLS);
    const ns = nsPerCall(c.headers, (h) => c.keys.authenticate({ headers: { authorization: h } }).id, CALLS);
    if (round < 0) continue;
    const figures = perCase.get(c.size) as { ns: number[]; floorNs: number[] };
    figures.ns.push(ns);
    figures.floorNs.push(floor);
  }
}
const one = perCase.get(SIZES[0]) as { ns: number[] };
for (const c of cases) {
  const { ns, floorNs } = perCase.get(c.size) as { ns: number[]; floorNs: number[] };
  const toOne = median(ns.map((n, i) => n / (one.ns[i] as number)));
  emit({
    bench: "api-key-authenticate",
    keysConfigured: c.size,
    ns: Math.round(median(ns)),
    floorNs: Math.round(median(floorNs)),
    floorIs: "SHA-256 of the presented key, to hex",
    ratio: round3(median(ns.map((n, i) => n / (floorNs[i] as number)))),
    ratioOf: `authenticate ÷ the floor, median of ${ROUNDS} interleaved rounds of ${CALLS} calls`,
    ratioToOneKey: round3(toOne),
    ...(c.size === SIZES[SIZES.length - 1] ? { goal: `ratioToOneKey <= ${GOAL_RATIO}`, met: toOne <= GOAL_RATIO } : {}),
  });
}
