/**
 * Which side limits a `train_ppo` run, from what it logged: per-phase times (`generate_s`,
 * `experience_s`, `train_s`, `weight_sync_s`, `step_s`), the async loop's waits (`trainer_wait_s`,
 * `producer_wait_s`, `previous_publish_wait_s`, `publish_wait_s`), queue occupancy
 * (`buffer_fill`), the engines' meters (`engine_idle_share`, `requests_in_flight`), staleness and
 * padding (`padding_fraction`). Pure: metric rows and the run's settings in, a verdict out. The
 * head answers it for a job (`GET /api/jobs/:jobId/diagnosis`, {@link diagnoseJob}): `rtjob
 * diagnose JOB` prints it and the dashboard's job page shows it, one judgement for both.
 *
 * The verdict names one side (rollout, trainer, weight sync, the agent itself, or the queue), its
 * share of the wall-clock, the overlap bound (a step can take no less than the slower of the two
 * sides: generation, and training plus the weight sync), how far the run is from it, and the one
 * setting to change first, with the numbers that say so.
 *
 * @module
 */

/** A side that can limit a run. */
export type Side = 'rollout' | 'trainer' | 'weight sync' | 'agent' | 'queue';

/** One logged row: a step and values (a step may have several rows; they are merged). */
export interface MetricRow {
  step: number;
  values: Readonly<Record<string, number | null | undefined>>;
}

/** The verdict of {@link diagnose}. */
export interface Diagnosis {
  mode: 'sync' | 'async';
  /** Steps the medians were taken over (the first is left out when there are three or more). */
  steps: number;
  /** Median seconds a step took. */
  stepS: number;
  limit: Side;
  /** Share of the wall-clock the limiting side accounts for. */
  share: number;
  /** Median seconds per step of each side (what the share is made of). */
  sides: { rollout: number; trainer: number; weightSync: number; other: number };
  /** The overlap bound: seconds a step would take with the two sides fully overlapped. */
  boundS: number;
  /** `boundS / stepS` (at most 1): 1 at the bound. */
  attainment: number;
  /** The one setting to change first. */
  change: { flag: string; to: string; why: string };
  /** The numbers behind the verdict, one line each. */
  evidence: string[];
}

/** A run that logged too little to judge. */
export interface NoDiagnosis {
  reason: string;
}

const median = (xs: number[]): number => {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};
const pct = (x: number): string => `${(x * 100).toFixed(0)}%`;
const sec = (x: number): string => `${x < 10 ? x.toFixed(2) : x.toFixed(1)} s`;

/** Steps with a trained update (`step_s` logged), their rows merged, in step order. */
function trainedSteps(rows: readonly MetricRow[]): Record<string, number>[] {
  const by = new Map<number, Record<string, number>>();
  for (const r of rows) {
    const m = by.get(r.step) ?? {};
    for (const [k, v] of Object.entries(r.values)) if (typeof v === 'number') m[k] = v;
    by.set(r.step, m);
  }
  return [...by.entries()]
    .sort((a, b) => a[0] - b[0])
    .map(([, v]) => v)
    .filter((v) => Number.isFinite(v.step_s));
}

/**
 * Judges a run from its metric rows and settings (flag name without `--` → value, as the job's
 * config table has them).
 *
 * @example
 * const d = diagnose(rows, { 'async-train': 'false', 'async-num-tasks': '128' });
 * if (!('reason' in d)) console.log(d.limit, d.change.flag);
 */
export function diagnose(
  rows: readonly MetricRow[],
  settings: Readonly<Record<string, string>> = {},
): Diagnosis | NoDiagnosis {
  let steps = trainedSteps(rows);
  if (steps.length === 0)
    return { reason: 'no trained step logged step_s yet (train_ppo logs it after each update)' };
  // The first step pays for compilation and warm caches; it speaks for no other.
  if (steps.length >= 3) steps = steps.slice(1);
  const m = (k: string): number =>
    median(steps.map((s) => s[k]).filter(Number.isFinite) as number[]);
  const has = (k: string): boolean => steps.some((s) => Number.isFinite(s[k]));
  const async = has('buffer_fill') || settings['async-train'] === 'true';
  const stepS = m('step_s');
  const gen = m('generate_s');
  const train = (has('experience_s') ? m('experience_s') : 0) + m('train_s');
  const sync = has('weight_sync_s') ? m('weight_sync_s') : 0;
  const idle = has('engine_idle_share') ? m('engine_idle_share') : undefined;
  const inFlight = has('requests_in_flight') ? m('requests_in_flight') : undefined;
  const padding = has('padding_fraction') ? m('padding_fraction') : undefined;
  const engines = Number(settings['rollout-num-engines'] ?? 1);
  const episodes =
    Number(settings['rollout-batch-size'] ?? NaN) * Number(settings['n-samples-per-prompt'] ?? NaN);
  const perEngine = episodes / Math.max(1, engines);
  const cap = Number(settings['async-num-tasks'] ?? 128);
  const evidence: string[] = [];
  const boundS = Math.max(gen, train + sync);

  let limit: Side;
  let share: number;
  if (!async) {
    const parts: [Side, number][] = [
      ['rollout', gen],
      ['trainer', train],
      ['weight sync', sync],
    ];
    [limit, share] = parts.reduce((a, b) => (b[1] > a[1] ? b : a));
    share /= stepS;
    evidence.push(
      `sync step ${sec(stepS)} = generate_s ${sec(gen)} (${pct(gen / stepS)}) + experience_s+train_s ${sec(train)} (${pct(train / stepS)}) + weight_sync_s ${sec(sync)} (${pct(sync / stepS)})` +
        (stepS - gen - train - sync > 0.05 * stepS
          ? ` + other ${sec(stepS - gen - train - sync)}`
          : ''),
    );
  } else {
    const wait = m('trainer_wait_s');
    // producer_wait_s is a running total: a step's share is its increase.
    const totals = steps.map((s) => s.producer_wait_s).filter(Number.isFinite) as number[];
    const producerWait =
      totals.length >= 2
        ? median(totals.slice(1).map((t, i) => Math.max(0, t - totals[i]!)))
        : (totals[0] ?? 0) / Math.max(1, steps.length);
    const publishWait = has('previous_publish_wait_s') ? m('previous_publish_wait_s') : 0;
    const fill = has('buffer_fill') ? m('buffer_fill') : NaN;
    const queue = Number(settings['async-queue-size'] ?? NaN);
    evidence.push(
      `async step ${sec(stepS)}: the trainer waited ${sec(wait)} for a batch (trainer_wait_s, ${pct(wait / stepS)}); the rollout waited ${sec(producerWait)} for a free slot (producer_wait_s, ${pct(producerWait / stepS)})`,
      `generate_s ${sec(gen)} a batch; trainer side ${sec(train)} (experience_s+train_s) + ${sec(sync)} weight_sync_s` +
        (publishWait > 0.01 ? ` + ${sec(publishWait)} waiting for the previous publish` : ''),
    );
    if (Number.isFinite(fill))
      evidence.push(
        `buffer_fill ${fill.toFixed(1)} batches when the trainer takes one` +
          (Number.isFinite(queue) ? ` (queue size ${queue})` : ''),
      );
    const waitShare = wait / stepS;
    const prodShare = producerWait / stepS;
    if (waitShare > 0.15 && prodShare > 0.15) {
      limit = 'queue';
      share = Math.min(waitShare, prodShare);
    } else if (waitShare >= prodShare) {
      limit = 'rollout';
      share = Math.max(waitShare, gen / stepS);
    } else if (sync + publishWait > train) {
      limit = 'weight sync';
      share = (sync + publishWait) / stepS;
    } else {
      limit = 'trainer';
      share = Math.max(prodShare, train / stepS);
    }
  }
  if (limit === 'rollout' && idle !== undefined && idle > 0.5) {
    limit = 'agent';
    share *= idle;
  }
  if (idle !== undefined)
    evidence.push(
      `engine_idle_share ${idle.toFixed(2)}: while episodes ran, the engines had no request in flight ${pct(idle)} of the time (the agent's own work: tools, environment, reward)`,
    );
  if (inFlight !== undefined)
    evidence.push(
      `requests_in_flight ${inFlight.toFixed(1)} per busy engine` +
        (Number.isFinite(perEngine)
          ? ` (${Math.round(perEngine)} episodes per engine a step, --async-num-tasks ${cap})`
          : ''),
    );
  if (padding !== undefined)
    evidence.push(`padding_fraction ${padding.toFixed(2)} of the positions the trainer computed`);
  if (has('staleness_mean'))
    evidence.push(
      `staleness_mean ${m('staleness_mean').toFixed(2)}, max ${m('staleness_max').toFixed(0)} versions`,
    );

  const change = firstChange({
    limit,
    async,
    stepS,
    gen,
    train,
    sync,
    boundS,
    idle,
    padding,
    perEngine,
    cap,
    engines,
    settings,
  });
  return {
    mode: async ? 'async' : 'sync',
    steps: steps.length,
    stepS,
    limit,
    // Medians of different series: a side's median may pass the step's; a share is at most all.
    share: Math.min(1, share),
    sides: {
      rollout: gen,
      trainer: train,
      weightSync: sync,
      other: Math.max(0, stepS - (async ? Math.max(gen, train + sync) : gen + train + sync)),
    },
    boundS,
    attainment: Math.min(1, boundS / stepS),
    change,
    evidence,
  };
}

interface ChangeInput {
  limit: Side;
  async: boolean;
  stepS: number;
  gen: number;
  train: number;
  sync: number;
  boundS: number;
  idle: number | undefined;
  padding: number | undefined;
  perEngine: number;
  cap: number;
  engines: number;
  settings: Readonly<Record<string, string>>;
}

/** The one setting with the most to gain for the limiting side. */
function firstChange(c: ChangeInput): Diagnosis['change'] {
  const overlapGain = c.stepS / c.boundS;
  // A sync run whose other side is a real part of the step gains most from overlapping them.
  if (!c.async && c.limit !== 'agent' && overlapGain > 1.25)
    return {
      flag: '--async-train',
      to: 'on',
      why: `generation then overlaps training and the weight sync: a step tends to the overlap bound ${sec(c.boundS)} from ${sec(c.stepS)} (×${overlapGain.toFixed(2)}), at the cost of staleness up to --async-queue-size versions`,
    };
  switch (c.limit) {
    case 'agent':
      // More episodes at once fill the gaps; the cap binds only when an engine has more to run.
      if (Number.isFinite(c.perEngine) && c.perEngine <= c.cap)
        return {
          flag: '--rollout-batch-size',
          to: String(Number(c.settings['rollout-batch-size'] ?? 8) * 2),
          why: `the engines sit idle ${pct(c.idle ?? 0)} of the time episodes run, and all ${Math.round(c.perEngine)} episodes of an engine already run at once: more episodes a step fill the gaps the agent's own work leaves`,
        };
      return {
        flag: '--async-num-tasks',
        to: String(c.cap * 2),
        why: `the engines sit idle ${pct(c.idle ?? 0)} of the time episodes run: more episodes at once fill the gaps the agent's own work leaves`,
      };
    case 'rollout':
      if (Number.isFinite(c.perEngine) && c.perEngine > c.cap)
        return {
          flag: '--async-num-tasks',
          to: String(Math.min(Math.ceil(c.perEngine), c.cap * 4)),
          why: `each engine has ${Math.round(c.perEngine)} episodes a step but runs at most ${c.cap} at once: the in-flight cap, not the engine, holds generation back`,
        };
      return {
        flag: '--rollout-num-engines',
        to: String(c.engines + 1),
        why: `generation (${sec(c.gen)} a batch) is the slower side and the engines already run every episode they are given: another engine shares the batch`,
      };
    case 'trainer':
      if (c.padding !== undefined && c.padding > 0.3)
        return {
          flag: '--train-max-tokens-per-gpu',
          to: 'a token budget (e.g. 4 x the longest sequence)',
          why: `${pct(c.padding)} of the trainer's positions are padding: micro-batches cut by a token budget group similar lengths and waste less`,
        };
      return {
        flag: '--actor-num-replicas',
        to: String(Number(c.settings['actor-num-replicas'] ?? 1) + 1),
        why: `training (${sec(c.train)} a step) is the slower side: another data-parallel rank halves each rank's share of the batch`,
      };
    case 'weight sync':
      if (c.async && c.settings['partial-rollout'] !== 'true')
        return {
          flag: '--partial-rollout',
          to: 'on',
          why: 'each publish waits for the batch in generation to finish; with partial rollout engines load new weights between decode steps and the trainer stops waiting',
        };
      return {
        flag: '--rollout-batch-size',
        to: String(Number(c.settings['rollout-batch-size'] ?? 8) * 2),
        why: `one weight sync (${sec(c.sync)}) costs the same whatever the batch: a larger batch pays it over more samples`,
      };
    case 'queue':
      return {
        flag: '--async-queue-size',
        to: String(Number(c.settings['async-queue-size'] ?? 1) + 1),
        why: 'both sides wait on each other in turn: one more batch of room absorbs the variance (staleness may grow by one version)',
      };
  }
}

/** The verdict as lines for a terminal. */
export function formatDiagnosis(jobId: string, d: Diagnosis): string {
  return [
    `job ${jobId}: ${d.steps} step(s) analysed (${d.mode}), median step ${sec(d.stepS)}`,
    `limited by: ${d.limit}, ${pct(d.share)} of the wall-clock`,
    `overlap bound: ${sec(d.boundS)} a step (the slower of generation ${sec(d.sides.rollout)} and training + weight sync ${sec(d.sides.trainer + d.sides.weightSync)}); this run is at ${pct(d.attainment)} of it`,
    `change first: ${d.change.flag} ${d.change.to}: ${d.change.why}`,
    'evidence:',
    ...d.evidence.map((e) => `  ${e}`),
  ].join('\n');
}

/**
 * Judges a job from its stored metrics table and the config rows its run reported (`--flag` →
 * value), as the head's `GET /api/jobs/:jobId/diagnosis` answers it.
 */
export function diagnoseJob(
  table: { columns: readonly string[]; rows: ReadonlyArray<ReadonlyArray<number | null>> },
  config: readonly { name: string; value: string }[],
): Diagnosis | NoDiagnosis {
  const step = table.columns.indexOf('step');
  const rows: MetricRow[] = table.rows.map((r) => ({
    step: Number(r[step]),
    values: Object.fromEntries(table.columns.map((c, i) => [c, r[i]])),
  }));
  return diagnose(
    rows,
    Object.fromEntries(config.map((c) => [c.name.replace(/^--/, ''), c.value])),
  );
}
