/**
 * Real faults on a store server the harness started itself, as a test or the chaos nemesis applies
 * them. Only servers started with `{ faults: true }` carry this handle; an endpoint from the
 * environment (DATABASE_URL, S3_ENDPOINT) is never started for faults, so a fault test cannot end up
 * skipping its fault.
 */
export interface ServerFaults {
  /** Not killed (a paused server is running). */
  readonly running: boolean;
  readonly paused: boolean;
  /** SIGSTOP every process that serves requests: open connections stay open and nothing answers. */
  pause(): void;
  /** SIGCONT. */
  resume(): void;
  /** SIGKILL every process that serves requests and wait for them to exit. */
  kill(): Promise<void>;
  /** Kills if running, then starts again on the same port with the data it had; resolves once it answers. */
  restart(): Promise<void>;
}
