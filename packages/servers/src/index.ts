export { freePort } from "./ports.js";
export { dockerAvailable } from "./docker.js";
export { spawnTracked, killHard, findExecutable, requireExecutable, runOrThrow, waitFor, type Spawned } from "./processes.js";
export { ANSWERING_NODE_TIMEOUT_MS, startRedisNodes, type RedisNodeHandle, type RedisNodes, type StartRedisOptions } from "./redis.js";
export { startRedisCluster, type RedisCluster } from "./redis-cluster.js";
export { compileClockShim, CLOCK_SHIM_SOURCE, CLOCK_OFFSET_FILE_ENV } from "./clock-shim.js";
export { type ServerFaults } from "./faults.js";
export { startPostgres, type StartedPostgres, type StartPostgresOptions } from "./postgres.js";
export { startS3, listKeys, S3_INSTALL_HINT, type StartedS3 } from "./s3.js";
