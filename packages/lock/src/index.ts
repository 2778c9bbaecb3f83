// "@fenced/lock": Redlock leases over N independent Redis nodes, each carrying a fencing token per
// resource (PROTOCOL.md, "The lock"). The public API only.
//
// The layers, from the API down:
//   redlock.ts     Redlock: acquire, extend, release and using() — the rounds, their quorum and validity
//   acquire-round.ts  one acquisition round: grant and counters on every node, publish if needed, the validity
//   lease.ts       Lease: a held lease, its fences, signal and expiry (the calls it delegates to Redlock)
//   options.ts     the inputs and their checks (InvalidArgumentError before any command)
//   quorum.ts      one fan-out to every node: per-node timeouts, replies, the outcome once it is known
//   not-before.ts  the timer a node timeout waits on: never before nodeTimeoutMs by performance.now()
//   pipelining.ts  sendScript: one tick's scripts to a node as one write (the one way a script is sent)
//   scripts.ts     every Lua script, one place (acquire raises the token counter in the same script)
//   node-watch.ts  what the lock learns of each node's connection, and how a node's failure is named
//   probe.ts       probeNodes: each node's answer to a PING, named as the lock names failures (for health checks)
//   keys.ts        a resource's keys on a node; lease-value.ts, the random value that names a lease
//   client.ts      the Redis client by shape (ioredis 5 or 6, iovalkey, a Cluster)
//   node-redis.ts  fromNodeRedis: a node-redis client (redis 5 or 6) as that shape
//   valkey-glide.ts  fromValkeyGlide: a Valkey GLIDE client as that shape
//   errors.ts      the errors, their kinds and the reasons a node does not count
//   observe.ts     what an observer sees: each operation on node:diagnostics_channel and as an OpenTelemetry span
export { Redlock } from "./redlock.js";
export { type RedlockOptions, type HeldLease } from "./options.js";
export { Lease, holderOf } from "./lease.js";
export { LockNotAcquiredError, LeaseLostError, TokenSpaceExhaustedError } from "./errors.js";
export { resourceKeys } from "./keys.js";
export { LOCK_CHANNELS, type LockLostMessage, type LockOperationMessage } from "./observe.js";
export { probeNodes } from "./probe.js";
export { fromNodeRedis, type NodeRedisClient } from "./node-redis.js";
export { fromValkeyGlide, type ValkeyGlideClient } from "./valkey-glide.js";
