#!/usr/bin/env node
import { Command } from "commander";
import { clockJump, type Narrator } from "./clock-jump.js";

const program = new Command()
  .name("fenced-demo")
  .description("Replays the failures from \"How to do distributed locking\" against real servers.")
  .option("--scenario <name>", "scenario to run (clock-jump)", "clock-jump")
  .option("--json", "one JSON object per line instead of narration", false)
  .parse();

const options = program.opts<{ scenario: string; json: boolean }>();
const started = Date.now();
const narrator: Narrator = {
  step(event) {
    if (options.json) process.stdout.write(`${JSON.stringify({ scenario: options.scenario, t: Date.now() - started, ...event })}\n`);
    else process.stdout.write(`[${String(Date.now() - started).padStart(5)} ms] ${event.message}\n`);
  },
};

if (options.scenario !== "clock-jump") {
  process.stderr.write(`unknown scenario ${JSON.stringify(options.scenario)}; available: clock-jump\n`);
  process.exit(2);
}
const result = await clockJump(narrator);
const ok = result.bothBelieveTheyHold && result.ordered;
if (options.json) {
  process.stdout.write(`${JSON.stringify({ scenario: result.scenario, result: ok ? "shown" : "not-shown", bothBelieveTheyHold: result.bothBelieveTheyHold, token1: result.token1.toString(), token2: result.token2.toString(), ordered: result.ordered })}\n`);
}
process.exit(ok ? 0 : 1);
