import { spawnSync } from "node:child_process";
import type { StartedTestContainer } from "testcontainers";
import { freePort } from "./ports.js";
import { waitFor } from "./processes.js";
import { redisReady } from "./redis-probe.js";
import { persistenceArgs, type OwnedRedisNode, type RedisPersistence } from "./redis-node.js";

const IMAGE = "redis:7";

/**
 * Starts a redis:7 container bound to a fixed host port, so that restart() can bring the node
 * back on the same port (a Docker-assigned port may change when the container is recreated).
 */
async function startContainer(
  port: number | undefined,
  persistence: RedisPersistence,
): Promise<{ container: StartedTestContainer; port: number }> {
  const { GenericContainer } = await import("testcontainers");
  for (let attempt = 1; ; attempt++) {
    const hostPort = port ?? (await freePort());
    try {
      const container = await new GenericContainer(IMAGE)
        .withExposedPorts({ container: 6379, host: hostPort })
        .withCommand(["redis-server", "--protected-mode", "no", ...persistenceArgs(persistence)])
        .start();
      return { container, port: hostPort };
    } catch (err) {
      // Only a freshly chosen port may be swapped for another; a restart must keep its port.
      const taken = /port is already allocated|address already in use/i.test(String(err));
      if (!taken || attempt >= 5 || (port !== undefined && attempt >= 20)) throw err;
      if (port !== undefined) await new Promise((r) => setTimeout(r, 250));
    }
  }
}

/**
 * pause()/resume() are synchronous in the harness API (a test pauses a node and immediately
 * sends it a command), and the runtime client is asynchronous, so they go through the docker CLI.
 */
function dockerCli(args: readonly string[]): void {
  const result = spawnSync("docker", args, { encoding: "utf8" });
  if (result.error !== undefined || result.status !== 0) {
    throw new Error(
      `docker ${args.join(" ")} failed (pause/resume of Docker nodes needs a docker CLI that reaches the same engine as testcontainers): ${result.error?.message ?? result.stderr}`,
    );
  }
}

class DockerRedisNode implements OwnedRedisNode {
  readonly controllable = true;
  private isRunning = true;
  private isPaused = false;

  constructor(
    readonly name: string,
    readonly port: number,
    private container: StartedTestContainer,
    private readonly persistence: RedisPersistence,
  ) {}

  get host(): string {
    return this.container.getHost();
  }

  get url(): string {
    return `redis://${this.host}:${this.port}`;
  }

  get running(): boolean {
    return this.isRunning;
  }

  get paused(): boolean {
    return this.isPaused;
  }

  async kill(): Promise<void> {
    if (!this.isRunning) return;
    const handle = await this.dockerHandle();
    if (this.isPaused) await handle.unpause(); // Docker refuses to kill a paused container
    this.isPaused = false;
    await handle.kill({ signal: "SIGKILL" });
    await handle.wait();
    this.isRunning = false;
  }

  async restart(options: { keepData?: boolean } = {}): Promise<void> {
    await this.kill();
    if (options.keepData === false) {
      // A new container is the only clean way to wipe /data; it takes over the same host port.
      await this.container.stop();
      this.container = (await startContainer(this.port, this.persistence)).container;
    } else {
      await (await this.dockerHandle()).start();
    }
    this.isRunning = true;
    await waitFor(`Redis container ${this.name} on port ${this.port}`, () => redisReady(this.host, this.port), 30_000);
  }

  pause(): void {
    if (!this.isRunning) throw new Error(`Redis node ${this.name} is not running`);
    dockerCli(["pause", this.container.getId()]);
    this.isPaused = true;
  }

  resume(): void {
    if (!this.isRunning) throw new Error(`Redis node ${this.name} is not running`);
    dockerCli(["unpause", this.container.getId()]);
    this.isPaused = false;
  }

  setClockOffsetMs(): void {
    throw new Error(
      `Redis node ${this.name} runs in Docker; clock control needs local processes (startRedisNodes(n, { clockControl: [...] }) starts those)`,
    );
  }

  async dispose(): Promise<void> {
    if (this.isPaused) await (await this.dockerHandle()).unpause();
    this.isPaused = false;
    this.isRunning = false;
    await this.container.stop();
  }

  private async dockerHandle() {
    const { getContainerRuntimeClient } = await import("testcontainers");
    return (await getContainerRuntimeClient()).container.getById(this.container.getId());
  }
}

export async function startDockerRedisNode(name: string, persistence: RedisPersistence): Promise<OwnedRedisNode> {
  const { container, port } = await startContainer(undefined, persistence);
  const node = new DockerRedisNode(name, port, container, persistence);
  try {
    await waitFor(`Redis container ${name} on port ${port}`, () => redisReady(node.host, port), 30_000);
  } catch (err) {
    await node.dispose();
    throw err;
  }
  return node;
}
