export { freePort } from "./ports.js";
export { dockerAvailable } from "./docker.js";
export { spawnTracked, killHard, findExecutable, requireExecutable, runOrThrow, waitFor, type Spawned } from "./processes.js";
