/**
 * A lock per blob, so two processes fetching one repo at once never write one `.incomplete` file
 * together: an `O_EXCL` lock file in the cache's `.locks/` folder (where huggingface_hub keeps
 * its own), holding the owner's pid and host. Its holder refreshes its mtime; a lock whose owner
 * died on this host, or that nobody refreshed for `staleMs` (a crashed machine, a lock file a
 * Python run left behind), is taken over.
 *
 * @module
 */
import { closeSync, mkdirSync, openSync, readFileSync, statSync, unlinkSync } from 'node:fs';
import { rmSync, utimesSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import { dirname } from 'node:path';
import { pidAlive } from '../../runtime/pid.ts';
import { HubError } from './errors.ts';

/** A held lock. */
export interface BlobLock {
  /** Removes the lock file (once; later calls do nothing). */
  release(): void;
}

/** How a lock is waited for. */
export interface LockOptions {
  /** A lock untouched this long is taken over. @default 60_000 */
  staleMs?: number;
  /** Longest wait for another holder. @default 3_600_000 */
  timeoutMs?: number;
  /** Checked while waiting: when true the lock is no longer needed (the blob is whole). */
  done?: () => boolean;
}

interface Owner {
  pid: number;
  host: string;
}

function tryCreate(path: string): boolean {
  try {
    const fd = openSync(path, 'wx');
    writeSync(fd, JSON.stringify({ pid: process.pid, host: hostname() } satisfies Owner));
    closeSync(fd);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw err;
  }
}

/** Whether the lock at `path` may be taken over; a lock that vanished meanwhile counts as not. */
function isStale(path: string, staleMs: number): boolean {
  try {
    const age = Date.now() - statSync(path).mtimeMs;
    let owner: Partial<Owner> = {};
    try {
      owner = JSON.parse(readFileSync(path, 'utf8')) as Partial<Owner>;
    } catch {
      // A lock file with no owner in it (Python's filelock leaves an empty one): age decides.
    }
    const deadHere =
      owner.host === hostname() && typeof owner.pid === 'number' && !pidAlive(owner.pid);
    return deadHere || age > staleMs;
  } catch {
    return false;
  }
}

/**
 * Takes the lock at `path`, waiting while a live holder has it; resolves with `undefined` when
 * `done()` turns true first (another process finished the blob).
 */
export async function lockBlob(path: string, o: LockOptions = {}): Promise<BlobLock | undefined> {
  const staleMs = o.staleMs ?? 60_000;
  const deadline = Date.now() + (o.timeoutMs ?? 3_600_000);
  mkdirSync(dirname(path), { recursive: true });
  for (let waitMs = 20; ; waitMs = Math.min(1000, waitMs * 2)) {
    if (o.done?.()) return undefined;
    if (tryCreate(path)) return held(path, staleMs);
    // The race of two takers of one stale lock is as narrow as this stat-then-unlink.
    if (isStale(path, staleMs)) {
      rmSync(path, { force: true });
      continue;
    }
    if (Date.now() > deadline)
      throw new HubError(
        'HUB_LOCKED',
        `another process still holds ${path} (remove it if no download is running)`,
      );
    await new Promise((r) => setTimeout(r, waitMs));
  }
}

function held(path: string, staleMs: number): BlobLock {
  const refresh = setInterval(
    () => {
      const now = new Date();
      try {
        utimesSync(path, now, now);
      } catch {
        // Taken over after all (this process stalled past staleMs); the rename still decides.
      }
    },
    Math.max(50, staleMs / 4),
  );
  refresh.unref();
  let released = false;
  return {
    release: () => {
      if (released) return;
      released = true;
      clearInterval(refresh);
      try {
        unlinkSync(path);
      } catch {
        // Already gone (taken over as stale).
      }
    },
  };
}
