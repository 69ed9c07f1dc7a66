/**
 * `npm run bench -- rl`: the RL benchmarks of train_ppo. Prints a table and writes
 * bench/results/rl.json.
 *
 * 1. `overhead`: orchestration overhead. Four Rollout actors (real worker processes, real agent
 *    executor, tokenizer and reward) on simulated engines that answer after a per-token delay
 *    with lognormal (long-tailed) lengths, ASYNC_NUM_TASKS=256 each; thousands of episodes.
 *    Achieved episodes/s against the ideal those exact latencies allow: per engine, the same
 *    episodes list-scheduled in submission order on 256 slots with zero overhead.
 * 2. `sync-async`: sync vs async train_ppo on the built-in model and task, same cores, same
 *    data and seed: samples/s, wall time to a held-out accuracy target, final accuracy; both
 *    reward curves in docs/learning-curve-sync-vs-async.png.
 *
 * 3. `dp`: sync with 2 engines + 2 data-parallel trainer ranks vs 1 + 1, or the `RL_BENCH_MODES` given (not in the default set:
 *    `RL_BENCH=dp`).
 *
 * `RL_BENCH=overhead` (or `sync-async`, `dp`) runs one part; `RL_BENCH_EPISODES`, `RL_BENCH_STEPS` size them;
 * `RL_BENCH_REPEATS=2` runs sync, async, async, sync so that the shared machine's load drift cancels.
 * `RL_BENCH_EVAL_STEPS` (default 5) is `--eval-steps`; `-1` evaluates only before and after, so
 * samples/s measures training alone (mid-run evaluations share the engine with async generation).
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { GroupReport } from '../roles/episode-report.ts';
import type { PromptItem, Rollout } from '../roles/rollout.ts';
import { renderCurves, toPng, type Series } from '../train/ppo/curves.ts';
import { defineActor, init, kill, shutdown } from '../runtime/api.ts';

const resultsDir = fileURLToPath(new URL('./results/', import.meta.url));
const docsDir = fileURLToPath(new URL('../docs/', import.meta.url));
const shipped = fileURLToPath(new URL('../model/pretrained/rtjob-tiny-math', import.meta.url));
const parts = (process.env.RL_BENCH ?? 'overhead,sync-async').split(',');

interface Row {
  name: string;
  value: string;
  note?: string;
}
const rows: Row[] = [];
const json: Record<string, unknown> = { machine: { cpus: cpus().length, node: process.version } };

// ---- 1. orchestration overhead ----------------------------------------------------------------

/** Makespan of `durations` (in submission order) on `slots` parallel slots, greedy earliest-free. */
export function listScheduleMs(durations: number[], slots: number): number {
  const free = new Array<number>(Math.min(slots, Math.max(1, durations.length))).fill(0);
  let end = 0;
  for (const d of durations) {
    let k = 0;
    for (let i = 1; i < free.length; i++) if (free[i]! < free[k]!) k = i;
    free[k]! += d;
    if (free[k]! > end) end = free[k]!;
  }
  return end;
}

async function overhead(): Promise<void> {
  const engines = 4;
  const tasks = 256;
  const nSamples = 4;
  const episodes = Number(process.env.RL_BENCH_EPISODES ?? 16384);
  const prompts = Math.ceil(episodes / nSamples);
  const tokenLatencyMs = 10;
  const medianTokens = 32;
  const maxTokens = 512;
  const home = mkdtempSync(join(tmpdir(), 'rtjob-bench-rl-'));
  process.env.HOME = home;
  delete process.env.RTJOB_ADDRESS;
  const { writeTinyModel } = await import('../test/fixtures/agents/tiny-model.ts');
  const model = await writeTinyModel(home);
  await init();
  const RolloutActor = defineActor<typeof Rollout>(
    new URL('../roles/rollout.ts', import.meta.url),
    'Rollout',
  );
  const handles = Array.from({ length: engines }, (_, i) =>
    RolloutActor.options({
      numCpus: 0,
      maxConcurrency: 100000,
      env: { RTJOB_QUIET_BACKEND: '1' },
    }).remote({
      pretrain: model,
      engine: 'simulated',
      simulated: { tokenLatencyMs, medianTokens, sigma: 1, seed: i + 1 },
      generateMaxLen: maxTokens,
      promptMaxLen: 64,
      nSamplesPerPrompt: nSamples,
      asyncNumTasks: tasks,
    }),
  );
  try {
    await Promise.all(handles.map((h) => h.ready.remote()));
    const items: PromptItem[] = Array.from({ length: prompts }, (_, i) => ({
      index: i,
      prompt: `What is ${i % 90}+${(i * 7) % 50}?`,
      label: String((i % 90) + ((i * 7) % 50)),
      groupId: `g${i}`,
    }));
    // Warm-up: JIT, connections, tokenizer caches.
    await Promise.all(handles.map((h, e) => h.runGroup.remote(items[e]!)));
    const t0 = performance.now();
    const results: GroupReport[] = await Promise.all(
      items.map((it, k) => handles[k % engines]!.runGroup.remote(it)),
    );
    const wallMs = performance.now() - t0;
    const lengths = (g: GroupReport): number[] => g.trajectories.map((t) => t.responseTokens);
    let idealMs = 0;
    let tokens = 0;
    for (let e = 0; e < engines; e++) {
      const durations = results
        .filter((_, k) => k % engines === e)
        .flatMap(lengths)
        .map((n) => n * tokenLatencyMs);
      idealMs = Math.max(idealMs, listScheduleMs(durations, tasks));
    }
    const all = results.flatMap(lengths);
    tokens = all.reduce((a, b) => a + b, 0);
    const sorted = [...all].sort((a, b) => a - b);
    const done = results.reduce((a, g) => a + g.trajectories.length, 0);
    const achieved = done / (wallMs / 1000);
    const ideal = done / (idealMs / 1000);
    const ratio = achieved / ideal;
    const q = (p: number): number =>
      sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
    rows.push(
      {
        name: 'overhead: episodes',
        value: String(done),
        note: `${engines} engines × ASYNC_NUM_TASKS=${tasks}, ${nSamples} samples/prompt`,
      },
      {
        name: 'overhead: response tokens p50/p90/p99/max',
        value: `${q(0.5)}/${q(0.9)}/${q(0.99)}/${sorted.at(-1)}`,
        note: `lognormal, median ${medianTokens}, ${tokenLatencyMs} ms/token`,
      },
      {
        name: 'overhead: ideal episodes/s',
        value: ideal.toFixed(0),
        note: 'same latencies, list-scheduled on the slots, zero overhead',
      },
      {
        name: 'overhead: achieved episodes/s',
        value: achieved.toFixed(0),
        note: `wall ${(wallMs / 1000).toFixed(2)} s vs ideal ${(idealMs / 1000).toFixed(2)} s`,
      },
      {
        name: 'overhead: achieved / ideal',
        value: `${(ratio * 100).toFixed(1)}%`,
        note: 'target ≥ 90%',
      },
    );
    json.overhead = {
      engines,
      tasks,
      nSamples,
      episodes: done,
      tokens,
      tokenLatencyMs,
      medianTokens,
      wallMs,
      idealMs,
      achieved,
      ideal,
      ratio,
    };
  } finally {
    await Promise.allSettled(handles.map((h) => kill(h, { noRestart: true })));
    await shutdown();
    rmSync(home, { recursive: true, force: true });
  }
}

// ---- 2. sync vs async on the built-in model ---------------------------------------------------

/** The configurations the bench compares, by the flags they add to the same command. */
const modeFlags = {
  sync: [],
  async: ['--async-train', '--async-queue-size', '1'],
  'sync 1+1': ['--colocate-all-models'],
  'sync 2+2': ['--colocate-all-models', '--rollout-num-engines', '2', '--actor-num-replicas', '2'],
  'async 1+1': ['--async-train', '--async-queue-size', '1'],
  'async 2+2': [
    ...['--async-train', '--async-queue-size', '1'],
    ...['--rollout-num-engines', '2', '--actor-num-replicas', '2'],
  ],
} satisfies Record<string, string[]>;
type Mode = keyof typeof modeFlags;

interface RunResult {
  mode: string;
  minutes: number;
  samplesPerS: number;
  evalBefore: number;
  evalAfter: number;
  minutesToTarget: number | null;
  /** Samples/s between the first and the last trained step: without start-up and the first and last evaluation. */
  steadySamplesPerS: number;
  /** Mean seconds per step of each phase, and the busy fractions of both processes. */
  timeline: Record<string, number>;
  /** CPU cores the run's processes used on average (CPU seconds / wall seconds), and the machine's mean 1-min load. */
  cores: number;
  load: number;
  /** Work two busy processes did together over what one did alone, measured just before the run. */
  headroom: number;
  /** The share of a core one busy process got then (CPU time over wall time). */
  oneCore: number;
  reward: [number, number][];
  accuracy: [number, number][];
}

/** Loop iterations one busy child process completes in `ms`, and the CPU ms it got meanwhile. */
function spin(ms: number): Promise<{ n: number; cpuMs: number }> {
  const code = `let n=0;const c0=process.cpuUsage();const end=Date.now()+${ms};while(Date.now()<end){for(let i=0;i<1e5;i++)n+=i&1}const c=process.cpuUsage(c0);console.log(n,(c.user+c.system)/1000)`;
  return new Promise((resolve, reject) => {
    execFile(process.execPath, ['-e', code], (err, out) => {
      const [n, cpuMs] = out.trim().split(' ').map(Number);
      return err ? reject(err) : resolve({ n: n!, cpuMs: cpuMs! });
    });
  });
}

/**
 * How much more work two processes do at once than one, right now: 2 on two free cores, 1 when
 * the machine has only one core's worth to spare. Async overlaps two processes, so this is its ceiling.
 */
async function parallelHeadroom(ms = 3000): Promise<{ headroom: number; oneCore: number }> {
  const one = await spin(ms);
  const two = await Promise.all([spin(ms), spin(ms)]);
  return { headroom: (two[0]!.n + two[1]!.n) / Math.max(1, one.n), oneCore: one.cpuMs / ms };
}

async function trainRun(mode: Mode, steps: number): Promise<RunResult> {
  const { headroom, oneCore } = await parallelHeadroom();
  const { trainPpo } = await import('../train/ppo/main.ts');
  const out = mkdtempSync(join(tmpdir(), `rtjob-bench-${mode.replace(/\W+/g, '-')}-`));
  const reward: [number, number][] = [];
  const accuracy: [number, number][] = [];
  let samples = 0;
  let firstAt: number | undefined;
  let firstSamples = 0;
  let lastAt = 0;
  const sums: Record<string, number> = {};
  let trained = 0;
  let last: Record<string, number> = {};
  const cpu0 = cpuSeconds();
  const loads: number[] = [];
  const sampler = setInterval(() => loads.push(loadavg()[0]!), 2000);
  sampler.unref();
  const phases = [
    'generate_s',
    'generate_imbalance_s',
    'experience_s',
    'train_s',
    'weight_sync_s',
    'weight_sync_share',
    'train_compute_s',
    'train_imbalance_s',
    'allreduce_s',
    'optimizer_s',
    'publish_wait_s',
    'previous_publish_wait_s',
    'trainer_wait_s',
    'step_s',
  ];
  const t0 = performance.now();
  const log = {
    line: (t: string) => process.stdout.write(`  [${mode}] ${t}\n`),
    metric: (step: number, v: Record<string, number>) => {
      const min = (performance.now() - t0) / 60000;
      if (v.reward_mean !== undefined) {
        reward.push([min, v.reward_mean]);
        samples += v.samples ?? 0;
        if (firstAt === undefined) {
          firstAt = min;
          firstSamples = samples;
        }
        lastAt = min;
        trained++;
        last = v;
        for (const k of phases) if (v[k] !== undefined) sums[k] = (sums[k] ?? 0) + v[k]!;
      }
      if (v.eval_accuracy !== undefined) accuracy.push([step === 0 ? 0 : min, v.eval_accuracy]);
      if (v.eval_s !== undefined) sums.eval_beside_s = (sums.eval_beside_s ?? 0) + v.eval_s;
    },
  };
  const argv = [
    '--agent-func',
    fileURLToPath(new URL('../examples/agent.ts', import.meta.url)),
    '--max-steps',
    String(steps),
    '--eval-steps',
    process.env.RL_BENCH_EVAL_STEPS ?? '5',
    '--save-path',
    join(out, 'policy'),
    '--seed',
    '7',
    ...modeFlags[mode],
  ];
  try {
    const s = await trainPpo(argv, process.env, { log });
    const wall = (performance.now() - t0) / 1000;
    const cores = (cpuSeconds() - cpu0) / wall;
    const timeline: Record<string, number> = {};
    for (const [k, x] of Object.entries(sums))
      timeline[k] = k === 'eval_beside_s' ? x : x / Math.max(1, trained);
    const wallS = s.minutes * 60;
    // Sync: the engine works only while generating, the trainer only outside it; async reports both.
    timeline.rollout_busy_fraction = last.rollout_busy_fraction ?? (sums.generate_s ?? 0) / wallS;
    timeline.trainer_busy_fraction =
      last.trainer_busy_fraction ??
      ((sums.experience_s ?? 0) + (sums.train_s ?? 0) + (sums.weight_sync_s ?? 0)) / wallS;
    return {
      mode,
      minutes: s.minutes,
      samplesPerS: samples / (s.minutes * 60),
      evalBefore: s.evalBefore ?? 0,
      evalAfter: s.evalAfter ?? 0,
      minutesToTarget: null,
      steadySamplesPerS:
        firstAt !== undefined && lastAt > firstAt
          ? (samples - firstSamples) / ((lastAt - firstAt) * 60)
          : 0,
      timeline,
      cores,
      load: loads.length ? loads.reduce((a, b) => a + b, 0) / loads.length : loadavg()[0]!,
      headroom,
      oneCore,
      reward,
      accuracy,
    };
  } finally {
    clearInterval(sampler);
    rmSync(out, { recursive: true, force: true });
  }
}

/**
 * CPU seconds of this process and of its reaped children (the worker processes of the local
 * cluster, once a run has shut them down), from /proc; 0 where there is no /proc.
 */
function cpuSeconds(): number {
  try {
    const stat = readFileSync('/proc/self/stat', 'utf8');
    const f = stat
      .slice(stat.lastIndexOf(')') + 2)
      .split(' ')
      .map(Number);
    // Fields 14–17 of proc(5): utime, stime, cutime, cstime; f[0] is field 3.
    return (f[11]! + f[12]! + f[13]! + f[14]!) / 100;
  } catch {
    return 0;
  }
}

/** Mean of the runs' values. */
function mean(runs: RunResult[], get: (r: RunResult) => number): number {
  return runs.reduce((a, r) => a + get(r), 0) / Math.max(1, runs.length);
}

async function syncVsAsync(): Promise<void> {
  const steps = Number(process.env.RL_BENCH_STEPS ?? 30);
  const home = mkdtempSync(join(tmpdir(), 'rtjob-bench-rl-'));
  process.env.HOME = home;
  delete process.env.RTJOB_ADDRESS;
  try {
    // The machine's load drifts (shared cores), so with RL_BENCH_REPEATS=2 the runs go
    // sync, async, async, sync: a linear drift then weighs on both modes alike.
    const repeats = Number(process.env.RL_BENCH_REPEATS ?? 1);
    const runs: RunResult[] = [];
    for (let i = 0; i < repeats; i++) {
      for (const mode of i % 2 === 0 ? (['sync', 'async'] as const) : (['async', 'sync'] as const))
        runs.push(await trainRun(mode, steps));
    }
    const syncRuns = runs.filter((r) => r.mode === 'sync');
    const asyncRuns = runs.filter((r) => r.mode === 'async');
    const sync = syncRuns[0]!;
    const asyn = asyncRuns[0]!;
    // The target is what sync reaches (or RL_BENCH_TARGET): async must get there too, and faster.
    const target = Number(process.env.RL_BENCH_TARGET ?? sync.evalAfter);
    for (const r of runs)
      r.minutesToTarget = r.accuracy.find(([m, a]) => m > 0 && a >= target)?.[0] ?? null;
    const pct = (x: number): string => `${(x * 100).toFixed(1)}%`;
    const mins = (x: number | null): string => (x === null ? 'not reached' : `${x.toFixed(1)} min`);
    runs.forEach((r, i) => {
      rows.push({
        name: `run ${i + 1} ${r.mode}: samples/s`,
        value: r.samplesPerS.toFixed(2),
        note:
          `steady ${r.steadySamplesPerS.toFixed(2)}; ${steps} steps in ${r.minutes.toFixed(1)} min; accuracy ${pct(r.evalBefore)} → ${pct(r.evalAfter)}; ` +
          `to ${pct(target)}: ${mins(r.minutesToTarget)}; ${r.cores.toFixed(2)} cores used at load ${r.load.toFixed(1)}, parallel headroom ${r.headroom.toFixed(2)}×`,
      });
    });
    for (const r of [sync, asyn]) {
      const t = r.timeline;
      const f = (k: string): string => (t[k] === undefined ? '-' : t[k]!.toFixed(2));
      rows.push({
        name: `${r.mode}: per step (s)`,
        value: f('step_s'),
        note: `generate ${f('generate_s')}, experience ${f('experience_s')}, train ${f('train_s')}, publish ${f('weight_sync_s')} (gate wait ${f('publish_wait_s')}), trainer waits for data ${f('trainer_wait_s')} and for the last publish ${f('previous_publish_wait_s')}; busy: rollout ${f('rollout_busy_fraction')}, trainer ${f('trainer_busy_fraction')}${t.eval_beside_s !== undefined ? `; evals beside training ${f('eval_beside_s')} s` : ''}`,
      });
    }
    const ratio = (get: (r: RunResult) => number): string =>
      `${(mean(asyncRuns, get) / mean(syncRuns, get)).toFixed(2)}×`;
    const over = repeats > 1 ? ` (means of ${repeats} runs each)` : '';
    rows.push({
      name: 'async / sync samples/s',
      value: ratio((r) => r.samplesPerS),
      note: `target ≥ 1.5× with no accuracy loss${over}`,
    });
    rows.push({
      name: 'async / sync steady samples/s',
      value: ratio((r) => r.steadySamplesPerS),
      note: over,
    });
    rows.push({
      name: 'async / sync CPU cores used',
      value: ratio((r) => r.cores),
      note: 'async can only be faster by using more cores at once',
    });
    rows.push({
      name: 'parallel headroom',
      value: `${mean(runs, (r) => r.headroom).toFixed(2)}×`,
      note: 'work of 2 busy processes / 1, before each run: the most any overlap can gain here',
    });
    json.syncAsync = { steps, target, repeats, runs, sync, async: asyn };
    const series: Series[] = [
      { name: 'sync reward', points: sync.reward, color: '#1f77b4' },
      { name: 'async reward', points: asyn.reward, color: '#d62728' },
      { name: 'sync held-out accuracy', points: sync.accuracy, color: '#1f77b4', dashed: true },
      { name: 'async held-out accuracy', points: asyn.accuracy, color: '#d62728', dashed: true },
    ];
    const svg = renderCurves({
      title: 'train_ppo sync vs async (examples/agent.ts, built-in model)',
      xLabel: 'minutes',
      yLabel: 'reward / accuracy',
      series,
    });
    mkdirSync(docsDir, { recursive: true });
    const png = join(docsDir, 'learning-curve-sync-vs-async.png');
    rows.push({
      name: 'curves',
      value: toPng(svg, png) ? png : `${png.replace(/png$/, 'svg')} (no ImageMagick)`,
    });
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
}

/**
 * 3. `dp`: sync with 2 engines and 2 data-parallel trainer ranks against 1 + 1, both colocated
 *    (engines sleep while the trainers train), same data and seed: steady samples/s, accuracy and
 *    where each step's time goes. `RL_BENCH_MODES` picks other configurations of the same
 *    command (`sync 1+1`, `sync 2+2`, `async 1+1`, `async 2+2`); ratios are against the first.
 */
async function dataParallel(): Promise<void> {
  const steps = Number(process.env.RL_BENCH_STEPS ?? 20);
  const modes = (process.env.RL_BENCH_MODES ?? 'sync 1+1,sync 2+2').split(',').map((m) => {
    if (!(m in modeFlags)) throw new Error(`RL_BENCH_MODES: unknown mode '${m}'`);
    return m as Mode;
  });
  const home = mkdtempSync(join(tmpdir(), 'rtjob-bench-rl-'));
  process.env.HOME = home;
  delete process.env.RTJOB_ADDRESS;
  try {
    const repeats = Number(process.env.RL_BENCH_REPEATS ?? 1);
    const runs: RunResult[] = [];
    // Alternating order (A B, B A, ...) so a drift in the shared machine's load weighs alike.
    for (let i = 0; i < repeats; i++) {
      for (const mode of i % 2 === 0 ? modes : [...modes].reverse())
        runs.push(await trainRun(mode, steps));
    }
    const pct = (x: number): string => `${(x * 100).toFixed(1)}%`;
    for (const r of runs) {
      rows.push({
        name: `${r.mode}: steady samples/s`,
        value: r.steadySamplesPerS.toFixed(2),
        note: `${steps} steps in ${r.minutes.toFixed(1)} min; accuracy ${pct(r.evalBefore)} → ${pct(r.evalAfter)}; ${r.cores.toFixed(2)} cores used at load ${r.load.toFixed(1)}, parallel headroom ${r.headroom.toFixed(2)}×`,
      });
    }
    const by = (m: Mode) => runs.filter((r) => r.mode === m);
    const median = (xs: number[]): number => {
      const s = [...xs].sort((a, b) => a - b);
      const k = s.length >> 1;
      return s.length % 2 ? s[k]! : (s[k - 1]! + s[k]!) / 2;
    };
    const med = (m: Mode, get: (r: RunResult) => number): number => median(by(m).map(get));
    // Per-phase seconds per step (medians over runs): what the driver waits on in turn, and
    // inside train, what rank 0 saw; "other" is the step less the phases (wake/sleep, calls).
    for (const m of modes) {
      const t = (k: string) => med(m, (r) => r.timeline[k] ?? 0);
      const step = t('step_s');
      const known = t('generate_s') + t('experience_s') + t('train_s') + t('weight_sync_s');
      const f = (x: number): string => x.toFixed(2);
      rows.push({
        name: `${m}: per step (s)`,
        value: f(step),
        note:
          `generate ${f(t('generate_s'))} [engine imbalance ${f(t('generate_imbalance_s'))}], experience (reference/critic) ${f(t('experience_s'))}, ` +
          `train ${f(t('train_s'))} [compute ${f(t('train_compute_s'))}, rank imbalance ${f(t('train_imbalance_s'))}, all-reduce ${f(t('allreduce_s'))}, optimizer ${f(t('optimizer_s'))}], ` +
          `weight sync ${f(t('weight_sync_s'))} (${pct(t('weight_sync_share'))} of the step), other ${f(Math.max(0, step - known))}` +
          (m.startsWith('async')
            ? `; trainer waits for data ${f(t('trainer_wait_s'))}, busy: rollout ${f(t('rollout_busy_fraction'))}, trainer ${f(t('trainer_busy_fraction'))}`
            : ''),
      });
    }
    const base = modes[0]!;
    const over = repeats > 1 ? ` (medians of ${repeats} runs each)` : '';
    for (const m of modes.slice(1)) {
      const ratio = (get: (r: RunResult) => number): string =>
        `${(med(m, get) / med(base, get)).toFixed(2)}×`;
      rows.push({
        name: `${m} / ${base} steady samples/s`,
        value: ratio((r) => r.steadySamplesPerS),
        note: `${m === 'sync 2+2' && base === 'sync 1+1' ? 'goal ≥ 1.7× at equal accuracy' : ''}${over}`,
      });
      if (m === 'sync 2+2' && base === 'sync 1+1') {
        // The work is the same: 1+1 did it with `cores` (one busy role at a time, plus the V8
        // helper threads of its GC and compiler beside it), counted in what one busy process
        // got then (`oneCore`: 1 on a quiet machine); 2+2 has `headroom` of those to do it with,
        // so it can gain at most headroom / (cores / oneCore).
        const ceiling =
          med(m, (r) => r.headroom) / med(base, (r) => r.cores / Math.max(0.01, r.oneCore));
        rows.push({
          name: `${m} / ${base} ceiling now (headroom / ${base}'s cores in one process's shares)`,
          value: `${ceiling.toFixed(2)}×`,
          note: `measured ${((med(m, (r) => r.steadySamplesPerS) / med(base, (r) => r.steadySamplesPerS) / ceiling) * 100).toFixed(0)}% of it`,
        });
      }
      rows.push({
        name: `${m} / ${base} generate s per step`,
        value: ratio((r) => r.timeline.generate_s ?? 0),
      });
      rows.push({
        name: `${m} / ${base} train s per step`,
        value: ratio((r) => r.timeline.train_s ?? 0),
      });
    }
    json.dataParallel = { steps, repeats, modes, runs };
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
}

if (parts.includes('overhead')) await overhead();
if (parts.includes('dp')) await dataParallel();
if (parts.includes('sync-async')) {
  if (existsSync(join(shipped, 'config.json'))) await syncVsAsync();
  else
    rows.push({ name: 'sync-async', value: 'skipped', note: `no warm-start model at ${shipped}` });
}

const width = Math.max(...rows.map((r) => r.name.length));
const vwidth = Math.max(...rows.map((r) => r.value.length));
for (const r of rows)
  console.log(`${r.name.padEnd(width)}  ${r.value.padStart(vwidth)}  ${r.note ?? ''}`);
mkdirSync(resultsDir, { recursive: true });
writeFileSync(join(resultsDir, 'rl.json'), JSON.stringify({ ...json, rows }, null, 2));
process.exit(0);
