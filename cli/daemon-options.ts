/**
 * How `rtjob start` hands a daemon (head or node agent) its options: in a file only the user can
 * read (0600), named on the daemon's command line and removed by the daemon once read, so the
 * cluster token never shows in `ps` or `/proc/<pid>/cmdline`.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { CliError } from './client.ts';

/** Writes `options` for a daemon to a private file in `dir`; returns its path. */
export function writeDaemonOptions(dir: string, options: unknown): string {
  const path = join(dir, `.daemon-options-${randomBytes(6).toString('hex')}.json`);
  writeFileSync(path, JSON.stringify(options), { mode: 0o600, flag: 'wx' });
  return path;
}

/** In a daemon: reads (and removes) the options file its command line names. */
export function readDaemonOptions<T>(): T {
  const path = process.argv[2];
  if (!path) throw new CliError('usage: <daemon> <options file>', 2);
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as T;
  } finally {
    rmSync(path, { force: true });
  }
}
