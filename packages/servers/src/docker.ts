/**
 * Whether a Docker engine answers. testcontainers fails in milliseconds without one;
 * the `docker` CLI alone proves nothing, so ask the runtime client itself.
 */
let answer: Promise<boolean> | undefined;

export function dockerAvailable(): Promise<boolean> {
  if (process.env.FENCED_NO_DOCKER === "1") return Promise.resolve(false);
  answer ??= (async () => {
    try {
      const { getContainerRuntimeClient } = await import("testcontainers");
      await getContainerRuntimeClient();
      return true;
    } catch {
      return false;
    }
  })();
  return answer;
}
