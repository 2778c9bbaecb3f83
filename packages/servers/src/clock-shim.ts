import { createHash } from "node:crypto";
import { existsSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { findExecutable, runOrThrow } from "./processes.js";

/** Environment variable naming the file that holds the wall-clock offset (integer milliseconds). */
export const CLOCK_OFFSET_FILE_ENV = "FENCED_CLOCK_OFFSET_FILE";

/**
 * An LD_PRELOAD object that shifts the wall clock of one process by an offset read from a file.
 *
 * libfaketime would be the usual tool, but it deadlocks at start-up with Debian's jemalloc-linked
 * redis-server. This shim avoids everything that can re-enter the allocator or the dynamic linker:
 * no dlsym (clock_gettime is answered by the raw syscall), no malloc, no stdio.
 *
 * Only CLOCK_REALTIME(_COARSE), gettimeofday and time move: Redis 7.0 expires keys by wall clock,
 * and its timers use the monotonic clock, which a real NTP step does not move either.
 * The path is copied at load time because Redis rewrites the environ area for its process title.
 */
export const CLOCK_SHIM_SOURCE = String.raw`
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static char offset_path[4096];
static long long offset_ns;      /* accessed with __atomic builtins: Redis has several threads */
static long long next_read_ns;   /* monotonic time after which the file is read again */

__attribute__((constructor)) static void shim_init(void) {
  const char *p = getenv("${CLOCK_OFFSET_FILE_ENV}");
  if (p != NULL && strlen(p) < sizeof offset_path) strcpy(offset_path, p);
}

static long long read_offset_ns(void) {
  struct timespec mono;
  syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &mono);
  long long now = mono.tv_sec * 1000000000LL + mono.tv_nsec;
  if (offset_path[0] == 0 || now < __atomic_load_n(&next_read_ns, __ATOMIC_RELAXED))
    return __atomic_load_n(&offset_ns, __ATOMIC_RELAXED);
  __atomic_store_n(&next_read_ns, now + 1000000LL, __ATOMIC_RELAXED);
  char buf[32];
  int fd = (int)syscall(SYS_open, offset_path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return __atomic_load_n(&offset_ns, __ATOMIC_RELAXED);
  long n = syscall(SYS_read, fd, buf, sizeof buf - 1);
  syscall(SYS_close, fd);
  if (n <= 0) return __atomic_load_n(&offset_ns, __ATOMIC_RELAXED);
  long long ms = 0, sign = 1;
  int i = 0, digits = 0;
  if (buf[0] == '-') { sign = -1; i = 1; }
  for (; i < n && buf[i] >= '0' && buf[i] <= '9'; i++, digits++) ms = ms * 10 + (buf[i] - '0');
  if (digits > 0) __atomic_store_n(&offset_ns, sign * ms * 1000000LL, __ATOMIC_RELAXED);
  return __atomic_load_n(&offset_ns, __ATOMIC_RELAXED);
}

int clock_gettime(clockid_t id, struct timespec *ts) {
  long r = syscall(SYS_clock_gettime, id, ts);
  if (r != 0 || (id != CLOCK_REALTIME && id != CLOCK_REALTIME_COARSE)) return (int)r;
  long long t = ts->tv_sec * 1000000000LL + ts->tv_nsec + read_offset_ns();
  ts->tv_sec = t / 1000000000LL;
  ts->tv_nsec = t % 1000000000LL;
  return 0;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  tv->tv_sec = ts.tv_sec;           /* glibc declares tv nonnull */
  tv->tv_usec = ts.tv_nsec / 1000;
  if (tz != NULL) memset(tz, 0, sizeof(struct timezone));
  return 0;
}

time_t time(time_t *out) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (out != NULL) *out = ts.tv_sec;
  return ts.tv_sec;
}
`;

let compiled: string | undefined;

/**
 * Path of the compiled shim, built with gcc on first use and cached in the temp directory under a
 * name derived from the source, so later runs (and parallel test processes) reuse it.
 */
export function compileClockShim(): string {
  if (compiled !== undefined && existsSync(compiled)) return compiled;
  const hash = createHash("sha256").update(CLOCK_SHIM_SOURCE).update(process.arch).digest("hex").slice(0, 16);
  const target = join(tmpdir(), `fenced-clock-shim-${hash}.so`);
  if (!existsSync(target)) {
    const gcc = findExecutable("gcc");
    if (gcc === undefined) {
      throw new Error(
        "'gcc' was not found on PATH; it is needed to build the clock shim for clock-jump tests. Install it: apt-get install gcc libc6-dev",
      );
    }
    // Unique scratch names, then an atomic rename: other test processes may be compiling the
    // same file at this moment, and none of them may ever load a half-written object.
    const scratch = join(tmpdir(), `fenced-clock-shim-${hash}.${process.pid}.${Math.random().toString(36).slice(2)}`);
    try {
      writeFileSync(`${scratch}.c`, CLOCK_SHIM_SOURCE);
      try {
        runOrThrow(gcc, ["-shared", "-fPIC", "-O2", "-Wall", "-o", `${scratch}.so`, `${scratch}.c`]);
      } catch (err) {
        throw new Error(
          `compiling the clock shim failed (are the C headers installed? apt-get install gcc libc6-dev): ${err instanceof Error ? err.message : String(err)}`,
        );
      }
      renameSync(`${scratch}.so`, target);
    } finally {
      rmSync(`${scratch}.c`, { force: true });
      rmSync(`${scratch}.so`, { force: true });
    }
  }
  compiled = target;
  return target;
}

/** Sets the offset a shimmed process sees; written atomically so the shim never reads a partial number. */
export function writeClockOffset(file: string, offsetMs: number): void {
  if (!Number.isFinite(offsetMs)) throw new Error(`clock offset must be a finite number of milliseconds, got ${offsetMs}`);
  const scratch = `${file}.${process.pid}.tmp`;
  writeFileSync(scratch, `${Math.round(offsetMs)}\n`);
  renameSync(scratch, file);
}
