/**
 * Human units for people reading rtjob's output: durations, byte sizes, and the line of a failed
 * job's message that says why. Pure (no Node or DOM imports): the CLI imports it, and so does the
 * dashboard's browser bundle.
 *
 * @module
 */

/**
 * `12.3s`, `3m 05s`, `1h 02m`; a negative duration (clock skew between machines) reads as 0.
 *
 * @example
 * duration(185_000); // '3m 05s'
 */
export function duration(ms: number): string {
  if (!(ms > 0)) ms = 0;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)}s`;
  const s = Math.floor(ms / 1000);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  return h > 0
    ? `${h}h ${String(m).padStart(2, '0')}m`
    : `${m}m ${String(s % 60).padStart(2, '0')}s`;
}

/**
 * A job's headline metric as the run prints it: accuracies in percent, others to three decimals,
 * first → last when it moved.
 *
 * @example
 * headlineText({ name: 'eval_accuracy', first: 0.044, last: 0.038 }); // 'eval_accuracy 4.4% → 3.8%'
 */
export function headlineText(h: { name: string; first: number | null; last: number }): string {
  const f = (x: number): string =>
    h.name.includes('accuracy') ? `${(x * 100).toFixed(1)}%` : x.toFixed(3);
  return `${h.name} ${h.first !== null && h.first !== h.last ? `${f(h.first)} → ` : ''}${f(h.last)}`;
}

/**
 * Binary units with one decimal: `512 B`, `1.5 KiB`, `3.2 GiB`.
 *
 * @example
 * bytes(1536); // '1.5 KiB'
 */
export function bytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${n.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}

const byteUnits: Record<string, number> = {
  '': 1,
  b: 1,
  k: 1e3,
  kb: 1e3,
  kib: 2 ** 10,
  m: 1e6,
  mb: 1e6,
  mib: 2 ** 20,
  g: 1e9,
  gb: 1e9,
  gib: 2 ** 30,
  t: 1e12,
  tb: 1e12,
  tib: 2 ** 40,
};

/**
 * A byte size a person wrote (`2GiB`, `512MB`, `1.5G`, `1000000`), as a whole number of bytes;
 * undefined when it is not one. Decimal units are powers of 1000, binary (`KiB`…) of 1024.
 *
 * @example
 * parseBytes('2GiB'); // 2147483648
 */
export function parseBytes(text: string): number | undefined {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$/i.exec(text);
  const unit = m ? byteUnits[m[2]!.toLowerCase()] : undefined;
  if (!m || unit === undefined) return undefined;
  return Math.floor(Number(m[1]) * unit);
}

/**
 * What a job that ends now leaves to resume from: its checkpoint and the exact flags, or, with
 * none, that the steps done are lost. `stepsDone` is the last step that finished.
 *
 * @example
 * resumeAdvice(undefined, 22); // 'no checkpoint: the 22 steps done are lost'
 */
export function resumeAdvice(
  checkpoint: { step: number; resumeFlags: string } | undefined,
  stepsDone: number | null,
): string {
  if (!checkpoint)
    return stepsDone ? `no checkpoint: the ${stepsDone} steps done are lost` : 'no checkpoint';
  const after = (stepsDone ?? 0) - checkpoint.step;
  const lost =
    after > 1
      ? ` (steps ${checkpoint.step + 1}–${stepsDone} are lost)`
      : after === 1
        ? ` (step ${stepsDone} is lost)`
        : '';
  return `the last checkpoint is at step ${checkpoint.step}${lost}: run the same command with ${checkpoint.resumeFlags} to resume from it`;
}

/**
 * The command that resumes a run from its checkpoint: the run's own argv without the flags that
 * chose a checkpoint folder or resumed, then `resumeFlags`, each word quoted for a POSIX shell
 * where it needs it.
 *
 * @example
 * resumeCommand(['train_ppo', '--max-steps', '5'], '--ckpt-path /c --load-checkpoint');
 * // 'train_ppo --max-steps 5 --ckpt-path /c --load-checkpoint'
 */
export function resumeCommand(argv: readonly string[], resumeFlags: string): string {
  const kept: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const name = a.split('=')[0]!.replace(/_/g, '-');
    if (name === '--load-checkpoint') continue;
    if (name === '--ckpt-path') {
      if (!a.includes('=')) i++;
      continue;
    }
    kept.push(a);
  }
  const quote = (w: string): string =>
    /^[\w@%+=:,./-]+$/.test(w) ? w : `'${w.replace(/'/g, `'\\''`)}'`;
  return [...kept.map(quote), resumeFlags].join(' ');
}

/**
 * What a stopped job leaves to resume from, as lines: the last step it finished and its checkpoint
 * (`resumeAdvice`), and with one the exact command that resumes it (`rtjob stop-job` prints them,
 * the job page shows them). None for a job that reports
 * no steps (not a training run).
 */
export function stopAdvice(job: {
  entrypoint: string[];
  progress?: { step: number | null } | undefined;
  report?: { checkpoint?: { step: number; resumeFlags: string } } | undefined;
}): string[] {
  const step = job.progress?.step ?? null;
  const checkpoint = job.report?.checkpoint;
  if (step === null && !checkpoint) return [];
  const lines = [`last finished step ${step ?? 0}; ${resumeAdvice(checkpoint, step)}`];
  if (checkpoint)
    lines.push(
      `resume (with the job's submit options): rtjob submit -- ${resumeCommand(job.entrypoint, checkpoint.resumeFlags)}`,
    );
  return lines;
}

/** A line that starts with an error's name, after an optional `program: ` (`train_ppo: RoleDiedError: …`). */
const errorStart = /^(\S+: )?[A-Z]\w*(Error|Exception)\b/;
/** Lines around an error that say nothing about it: stack frames and Node's version footer. */
const noise = /^\s+at |^Node\.js v\d/;

/**
 * The line of a failed job's message (`driver exited with code 1; last output:` and its last log
 * lines) that says why: the last line that starts with an error's name, else the last line that is
 * no stack frame, else the message's first line.
 *
 * @example
 * failureReason('driver exited with code 1; last output:\n[train_ppo] step 6/300\ntrain_ppo: RoleDiedError: the trainer died\n    at main (main.ts:3)');
 * // 'train_ppo: RoleDiedError: the trainer died'
 */
export function failureReason(message: string): string {
  const lines = message.split('\n').filter((l) => l.trim() !== '');
  const named = lines.findLast((l) => errorStart.test(l));
  const line = named ?? lines.findLast((l) => !noise.test(l)) ?? lines[0] ?? '';
  return line.trim().replace(/; last output:$/, '');
}
