/**
 * `--use-tensorboard DIR`: TensorBoard event files written by rtjob itself (no TensorFlow, no
 * Python). As in OpenRLHF, the run writes to `DIR/<run name>`, so `tensorboard --logdir DIR`
 * shows several runs side by side. The file holds the run's settings as a text summary (tag
 * `config`, a Markdown table, at step 0) and every metric of every step as a scalar.
 *
 * @module
 */
import { closeSync, mkdirSync, openSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import { join, resolve } from 'node:path';
import { FlagError } from '../driver-flags.ts';
import { fileVersionEvent, scalarsEvent, textEvent, tfRecord } from './event-file.ts';
import type { RunSetting, Tracker, TrackerRun } from './tracker.ts';

let files = 0;

/** The run's settings as a Markdown table. */
export function settingsMarkdown(program: string, settings: readonly RunSetting[]): string {
  const cell = (s: string) => s.replace(/\|/g, '\\|').replace(/\n/g, ' ');
  return [
    `**${program}**`,
    '',
    '| flag | value |',
    '|---|---|',
    ...settings.map((s) => `| --${cell(s.name)} | ${cell(s.value)} |`),
  ].join('\n');
}

/**
 * Opens an event file under `dir/<run name>`. A directory that cannot be made fails at once (a
 * bad flag); a later write error warns once and the run goes on.
 */
export function openTensorBoard(dir: string, run: TrackerRun): Tracker {
  const runDir = resolve(dir, run.name);
  const now = Date.now() / 1000;
  // The name TensorBoard looks for (`*tfevents*`), unique per process and writer.
  const file = join(
    runDir,
    `events.out.tfevents.${Math.floor(now)}.${hostname()}.${process.pid}.${files++}`,
  );
  let fd: number;
  try {
    mkdirSync(runDir, { recursive: true });
    fd = openSync(file, 'a');
  } catch (err) {
    throw new FlagError(
      '--use-tensorboard',
      `--use-tensorboard: cannot write ${runDir} (${(err as Error).message})`,
    );
  }
  const warn = run.warn ?? ((l: string) => process.stderr.write(`${l}\n`));
  let broken = false;
  const write = (record: Buffer): void => {
    if (broken) return;
    try {
      writeSync(fd, tfRecord(record));
    } catch (err) {
      broken = true;
      warn(
        `tensorboard: cannot write ${file} (${(err as Error).message}); the run goes on without it`,
      );
    }
  };
  write(fileVersionEvent(now));
  write(textEvent(now, 0, 'config', settingsMarkdown(run.program, run.settings)));
  return {
    kind: 'tensorboard',
    where: () => runDir,
    log(step, values) {
      write(scalarsEvent(Date.now() / 1000, step, values));
    },
    close() {
      if (!broken) closeSync(fd);
      broken = true;
      return Promise.resolve();
    },
  };
}
