/**
 * Maps shared-memory object files instead of reading them: a tiny N-API addon
 * (`addon/rtjob_mmap.c`, built with the system's gcc at first use by `runtime/native-addon.ts`)
 * maps a file of `/dev/shm` copy-on-write (`MAP_PRIVATE`), its pages mapped up front, and hands
 * it back as an `ArrayBuffer` that unmaps itself when collected. A get then copies nothing: the
 * reader's arrays are the file's pages, shared by every reader of the machine, and a reader that
 * writes to them copies only the pages it touches (another reader and the owner never see it).
 * The file may be removed at once (its object freed): the mapping keeps its pages.
 *
 * Where the addon cannot be built or loaded (no gcc, no Node headers), or `RTJOB_OBJECT_MMAP=0`,
 * readers read the file into a buffer instead (`shm.ts`), with no error.
 *
 * @module
 */
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { readEnv } from '../env.ts';
import { logger } from '../log.ts';
import { type AddonSource, buildAddon } from '../native-addon.ts';

const log = logger('objects');

interface MapAddon {
  mapFile(path: string, bytes: number): ArrayBuffer;
}

const here = dirname(fileURLToPath(import.meta.url));

/** The mapper's source and build folder (ignored). */
export const mapperSource: AddonSource = {
  what: 'the shared-memory mapper',
  source: join(here, 'addon', 'rtjob_mmap.c'),
  buildRoot: join(here, 'addon', 'build'),
  compiler: 'gcc',
  flags: ['-O2', '-std=c11', '-Wall'],
};

let addon: MapAddon | undefined | null = null;
let whyNot = '';

/**
 * The mapper, built (once per machine and source) and loaded at first use; undefined where
 * mapping is off or unavailable (`mapUnavailableReason` says why).
 */
function mapper(): MapAddon | undefined {
  if (addon !== null) return addon;
  addon = undefined;
  if (readEnv('RTJOB_OBJECT_MMAP') === false) {
    whyNot = 'RTJOB_OBJECT_MMAP=0';
    return addon;
  }
  if (process.platform !== 'linux') {
    whyNot = `not on Linux (${process.platform})`;
    return addon;
  }
  try {
    const path = buildAddon(mapperSource, { log: log.debug });
    addon = createRequire(import.meta.url)(path) as MapAddon;
  } catch (e) {
    whyNot = (e as Error).message.split('\n').join(' ');
    log.debug(`shared-memory objects are read, not mapped: ${whyNot}`);
  }
  return addon;
}

/** Whether this process maps shared-memory files (it then never hands one back for reuse). */
export function mapsSharedMemory(): boolean {
  return mapper() !== undefined;
}

/** Why this process reads shared-memory files instead of mapping them ('' when it maps). */
export function mapUnavailableReason(): string {
  mapper();
  return whyNot;
}

/**
 * The first `bytes` bytes of the file at `path`, mapped copy-on-write; undefined where mapping is
 * off or unavailable. Throws when the file cannot be mapped (missing, shorter than `bytes`).
 */
export function mapFile(path: string, bytes: number): Buffer | undefined {
  const m = mapper();
  if (!m) return undefined;
  return Buffer.from(m.mapFile(path, bytes));
}
