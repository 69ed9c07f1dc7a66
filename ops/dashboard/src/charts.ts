/**
 * Training charts: one small uPlot chart per metric, in the groups and order the job reported
 * (`report.charts`: for train_ppo reward, policy, timing, system, the key ones first), and a
 * second line when a job is compared, named once in a legend above the charts (each chart's own
 * legend shows only the hovered values). Metrics the job reported as `hidden` are not charted.
 * Drag to zoom a range,
 * double-click to reset; hovering shows every line's value at that step. Integer step ticks,
 * single points drawn, an EMA smoothing control, and an x axis in steps, wall time or generated
 * tokens (so runs that generate at different lengths compare by compute). Metrics
 * that have not changed (KL with coefficient 0, staleness in sync mode, a pass rate still at 1)
 * are folded into one line instead of flat charts; a live one gets its chart once it changes, so
 * charts only ever appear while a job runs. Data arrives incrementally (`append`), so a job that logs a row every
 * step for hours only ever sends the new rows.
 *
 * @module
 */
import uPlot from 'uplot';

import type { ChartLayout, MetricsTable } from './api.ts';
import { h } from './dom.ts';

/** A job's chart layout, resolved: group tests as functions, multi-line members by metric. */
interface Layout {
  groups: { title: string; first: string[]; match: (name: string) => boolean }[];
  multi: Record<string, { title: string; members: string[] }>;
  neverFolded: Set<string>;
  hidden: Set<string>;
  /** Metric → the multi-line chart it is drawn in. */
  inMulti: Map<string, string>;
  /** The metric of generated tokens so far (the tokens x axis), if the job names one. */
  tokens: string | undefined;
}

/**
 * Resolves the layout a job reported (`report.charts`); without one, every metric is a chart of
 * one group. The last group takes every metric no other group took.
 */
function resolveLayout(l: ChartLayout | undefined): Layout {
  const groups = (l?.groups.length ? l.groups : [{ title: 'Metrics' }]).map((g, i, all) => {
    const re = g.match === undefined ? undefined : new RegExp(g.match);
    const last = i === all.length - 1;
    return {
      title: g.title,
      first: g.first ?? [],
      match: (n: string) => last || (re?.test(n) ?? false),
    };
  });
  const multi = l?.multi ?? {};
  return {
    groups,
    multi,
    neverFolded: new Set(l?.neverFolded ?? []),
    hidden: new Set(l?.hidden ?? []),
    inMulti: new Map(
      Object.entries(multi).flatMap(([name, g]) => g.members.map((m) => [m, name] as const)),
    ),
    tokens: l?.tokens,
  };
}

const colors = ['#3b82f6', '#f97316', '#10b981', '#a855f7'];
const groupColors = ['#3b82f6', '#a855f7', '#f97316', '#10b981', '#ef4444', '#eab308', '#64748b'];

/** The x axis: training step, seconds since the job's first row, or generated tokens so far. */
export type XAxis = 'step' | 'wall' | 'tokens';

const xLabels: Record<XAxis, { axis: string; legend: string }> = {
  step: { axis: 'step', legend: 'step' },
  wall: { axis: 'wall time (s)', legend: 's' },
  tokens: { axis: 'generated tokens', legend: 'tokens' },
};

/** 1.2M, 350k, 900: token counts fit a narrow axis. */
function compact(v: number): string {
  if (Math.abs(v) >= 1e6) return `${+(v / 1e6).toFixed(2)}M`;
  if (Math.abs(v) >= 1e3) return `${+(v / 1e3).toFixed(1)}k`;
  return String(+v.toFixed(0));
}

/**
 * What the page's job is doing, for the words around the charts: whether it may still log, and
 * why it failed, with a link to its output.
 */
export interface ChartsJobState {
  live: boolean;
  failure?: { reason: string; logsHref: string };
}

/** Rows of one job keyed by step, one map per metric, and each step's time. */
class Series {
  readonly byMetric = new Map<string, Map<number, number | null>>();
  readonly timeOf = new Map<number, number>();
  lastStep = -Infinity;

  add(t: MetricsTable): void {
    const stepIdx = t.columns.indexOf('step');
    const timeIdx = t.columns.indexOf('time');
    this.#tokens = undefined;
    for (const row of t.rows) {
      const step = row[stepIdx] as number;
      if (step > this.lastStep) this.lastStep = step;
      if (timeIdx >= 0 && row[timeIdx] !== null) this.timeOf.set(step, row[timeIdx] as number);
      t.columns.forEach((c, i) => {
        if (c === 'step' || c === 'time') return;
        let m = this.byMetric.get(c);
        if (!m) this.byMetric.set(c, (m = new Map()));
        m.set(step, row[i] ?? null);
      });
    }
  }

  /** The tokens metric by step, ascending; rebuilt after rows arrive. */
  #tokens: [number, number][] | undefined;

  /**
   * Generated tokens at `step`: the latest value of `metric` (the layout's `tokens`) at or before
   * it (a row logged between steps, like an evaluation, sits where the tokens were), 0 before
   * the first; null when the job never logged it.
   */
  tokensAt(step: number, metric: string): number | null {
    this.#tokens ??= this.values(metric);
    const t = this.#tokens;
    if (t.length === 0) return null;
    let lo = 0;
    let hi = t.length - 1;
    let at = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (t[mid]![0] <= step) {
        at = mid;
        lo = mid + 1;
      } else hi = mid - 1;
    }
    return at < 0 ? 0 : t[at]![1];
  }

  /** The metric's values in step order, gaps dropped. */
  values(name: string): [number, number][] {
    const m = this.byMetric.get(name);
    if (!m) return [];
    return [...m].filter((e): e is [number, number] => e[1] !== null).sort((a, b) => a[0] - b[0]);
  }
}

/** Exponential moving average with weight `alpha` on the past (0 = raw), skipping gaps. */
function smooth(ys: (number | null)[], alpha: number): (number | null)[] {
  if (alpha <= 0) return ys;
  let acc: number | null = null;
  return ys.map((y) => {
    if (y === null) return null;
    acc = acc === null ? y : alpha * acc + (1 - alpha) * y;
    return acc;
  });
}

/** The charts of a job page. */
export class MetricCharts {
  readonly #root: HTMLElement;
  readonly #series: { label: string; data: Series }[] = [];
  readonly #plots = new Map<string, uPlot>();
  #smoothing = 0;
  #x: XAxis = 'step';
  #layoutOf = resolveLayout(undefined);
  #layoutKey = '';
  #percent = new Set<string>();
  #state: ChartsJobState = { live: true };

  constructor(root: HTMLElement) {
    this.#root = root;
  }

  /**
   * Lays the charts out as the page's job reported (`report.charts`); `percent`: the metrics its
   * summary cards show in percent, whose y axes then read in percent too.
   */
  setLayout(layout: ChartLayout | undefined, percent: readonly string[] = []): void {
    const key = JSON.stringify([layout ?? null, percent]);
    if (key === this.#layoutKey) return;
    this.#layoutKey = key;
    this.#layoutOf = resolveLayout(layout);
    this.#percent = new Set(percent);
    this.#reset();
  }

  /** Says what the page's job is doing (the empty and folded lines read after it). */
  setJobState(state: ChartsJobState): void {
    if (JSON.stringify(state) === JSON.stringify(this.#state)) return;
    this.#state = state;
    this.#reset();
  }

  /** Sets the jobs shown (first = the page's job, then the compared ones). */
  setJobs(labels: string[]): void {
    this.#series.length = 0;
    for (const label of labels) this.#series.push({ label, data: new Series() });
    this.#reset();
  }

  /** EMA weight on the past, 0 (raw) to 0.99. */
  setSmoothing(alpha: number): void {
    this.#smoothing = Math.min(0.99, Math.max(0, alpha));
    for (const n of this.#plots.keys()) this.#plots.get(n)?.setData(this.#dataFor(n));
  }

  setXAxis(x: XAxis): void {
    this.#x = x;
    this.#reset();
  }

  /** Adds rows for job `index`; returns the last step it now has (for `sinceStep`). */
  append(index: number, t: MetricsTable): number {
    const s = this.#series[index];
    if (!s) return -Infinity;
    const before = this.#layout();
    s.data.add(t);
    if (this.#layout() !== before) this.#reset();
    else for (const n of this.#plots.keys()) this.#plots.get(n)?.setData(this.#dataFor(n));
    return s.data.lastStep;
  }

  lastStep(index: number): number {
    return this.#series[index]?.data.lastStep ?? -Infinity;
  }

  /** First and last logged value of a metric of job `index`, how many points and the last step. */
  ends(
    index: number,
    name: string,
  ): { first: number; last: number; points: number; lastStep: number } | undefined {
    const v = this.#series[index]?.data.values(name);
    if (!v?.length) return undefined;
    return { first: v[0]![1], last: v.at(-1)![1], points: v.length, lastStep: v.at(-1)![0] };
  }

  /** Resizes charts to their container (window resize). */
  resize(): void {
    for (const [, p] of this.#plots) p.setSize({ width: this.#width(), height: 180 });
  }

  destroy(): void {
    for (const p of this.#plots.values()) p.destroy();
    this.#plots.clear();
  }

  /**
   * A metric is constant while every job shows one value for it, from its first point: a chart of
   * one value says nothing its folded line does not, and a live chart appears when the value
   * first changes instead of showing for a few steps and then vanishing. The headline metrics are
   * always charted (a flat reward early in a run is news, not noise).
   */
  #constant(name: string): number | undefined {
    if (this.#layoutOf.neverFolded.has(name)) return undefined;
    let value: number | undefined;
    for (const s of this.#series) {
      for (const [, v] of s.data.values(name)) {
        if (value !== undefined && v !== value) return undefined;
        value = v;
      }
    }
    return value;
  }

  /** Chart names (metrics, multi-line charts), and the constant metrics folded away. */
  #names(): { charts: string[]; constant: [string, number][] } {
    const all = new Set<string>();
    const constant: [string, number][] = [];
    const { hidden } = this.#layoutOf;
    for (const s of this.#series)
      for (const k of s.data.byMetric.keys()) if (!hidden.has(k)) all.add(k);
    const charts = new Set<string>();
    const { inMulti } = this.#layoutOf;
    for (const k of [...all].sort()) {
      // A phase of a multi-line chart stays in it even when it never changes.
      const c = inMulti.has(k) ? undefined : this.#constant(k);
      if (c !== undefined) constant.push([k, c]);
      else charts.add(inMulti.get(k) ?? k);
    }
    return { charts: [...charts], constant };
  }

  /** Charts by group, key ones first inside each group. */
  #grouped(): { title: string; names: string[] }[] {
    const { charts } = this.#names();
    const taken = new Set<string>();
    return this.#layoutOf.groups
      .map((g) => {
        const names = charts.filter((n) => !taken.has(n) && (g.first.includes(n) || g.match(n)));
        names.sort((a, b) => {
          const ia = g.first.indexOf(a);
          const ib = g.first.indexOf(b);
          return (ia < 0 ? 1e9 : ia) - (ib < 0 ? 1e9 : ib) || (a < b ? -1 : 1);
        });
        for (const n of names) taken.add(n);
        return { title: g.title, names };
      })
      .filter((g) => g.names.length > 0);
  }

  /** Which charts exist with which lines; a change rebuilds the charts. */
  #layout(): string {
    const { constant } = this.#names();
    const groups = this.#grouped().map((g) =>
      g.names
        .map((n) => (this.#layoutOf.multi[n] ? `${n}(${this.#members(n).join(',')})` : n))
        .join(' '),
    );
    return `${groups.join('|')}#${constant.map(([k, v]) => `${k}=${v}`).join(',')}`;
  }

  /** Members of a multi-line chart that the page's job logged (and that vary). */
  #members(name: string): string[] {
    const first = this.#series[0]?.data.byMetric;
    return (this.#layoutOf.multi[name]?.members ?? []).filter((m) => first?.has(m));
  }

  /** Whether job `index` logged generated tokens (so the tokens axis can show it). */
  hasTokens(index: number): boolean {
    const metric = this.#layoutOf.tokens;
    return metric !== undefined && (this.#series[index]?.data.byMetric.get(metric)?.size ?? 0) > 0;
  }

  /** The metric the tokens axis reads (the job's `charts.tokens`), if any. */
  get tokensMetric(): string | undefined {
    return this.#layoutOf.tokens;
  }

  /** x of a step of job `i`: the step, seconds since the job's first row, or tokens so far. */
  #xOf(i: number, step: number): number | null {
    if (this.#x === 'step') return step;
    const d = this.#series[i]!.data;
    if (this.#x === 'tokens') return d.tokensAt(step, this.#layoutOf.tokens ?? '');
    const t = d.timeOf.get(step);
    const t0 = Math.min(...d.timeOf.values());
    return t === undefined ? null : (t - t0) / 1000;
  }

  #dataFor(name: string): uPlot.AlignedData {
    // One x array shared by every line: each line's points sit at their own x, null elsewhere.
    const lines: { i: number; metric: string }[] = this.#layoutOf.multi[name]
      ? this.#members(name).map((m) => ({ i: 0, metric: m }))
      : this.#series.map((_, i) => ({ i, metric: name }));
    const points = lines.map(({ i, metric }) =>
      (this.#series[i]?.data.values(metric) ?? [])
        .map(([step, v]) => [this.#xOf(i, step), v] as const)
        .filter((p): p is readonly [number, number] => p[0] !== null),
    );
    const xs = [...new Set(points.flatMap((p) => p.map(([x]) => x)))].sort((a, b) => a - b);
    const ys = points.map((p) => {
      const at = new Map(p);
      return smooth(
        xs.map((x) => at.get(x) ?? null),
        this.#smoothing,
      );
    });
    return [xs, ...ys] as uPlot.AlignedData;
  }

  /** The line shown in place of charts: why there are none, and what to do. */
  #empty(): HTMLElement {
    const { live, failure } = this.#state;
    const howTo = h('code', {}, 'metrics.log(step, { reward_mean, kl, … })');
    if (failure)
      return h(
        'p',
        { class: 'empty', id: 'charts-empty' },
        'The job failed before it logged any metrics: ',
        h('span', { class: 'error' }, failure.reason),
        '. ',
        h('a', { href: failure.logsHref }, 'Its logs'),
        ' show the rest.',
      );
    return h(
      'p',
      { class: 'muted empty', id: 'charts-empty' },
      live
        ? 'No metrics yet. Log them from the driver with '
        : 'This job logged no metrics. Log them from the driver with ',
      howTo,
      '.',
    );
  }

  #width(): number {
    const w = this.#root.clientWidth || 900;
    const cols = w > 1100 ? 3 : w > 700 ? 2 : 1;
    return Math.floor(w / cols) - 24;
  }

  #reset(): void {
    this.destroy();
    this.#root.replaceChildren();
    const groups = this.#grouped();
    const { constant } = this.#names();
    if (groups.length === 0 && constant.length === 0) {
      this.#root.append(this.#empty());
      return;
    }
    const dark = matchMedia('(prefers-color-scheme: dark)').matches;
    const axis = {
      stroke: dark ? '#c9d1d9' : '#374151',
      grid: { stroke: dark ? '#30363d' : '#e5e7eb' },
      ticks: { stroke: dark ? '#30363d' : '#e5e7eb' },
    };
    const xAxis: uPlot.Axis = {
      ...axis,
      label: xLabels[this.#x].axis,
      labelSize: 16,
      // Steps are whole numbers: no 2.5 ticks, and no repeated labels when zoomed in.
      ...(this.#x === 'step'
        ? {
            incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000],
            values: (_u: uPlot, splits: number[]) =>
              splits.map((v) => (Number.isInteger(v) ? String(v) : '')),
          }
        : this.#x === 'tokens'
          ? { values: (_u: uPlot, splits: number[]) => splits.map(compact) }
          : {}),
    };
    // A line with one or two points is drawn as points, so a first step is visible.
    const fewPoints = (u: uPlot, si: number) =>
      (u.data[si] as (number | null)[]).filter((v) => v !== null).length <= 2;
    // A flat line sits on a small range around its value (a zero one on 0–1, not −1–1); a metric
    // that is never negative keeps 0 as its floor.
    const yRange = (_u: uPlot, min: number, max: number): uPlot.Range.MinMax => {
      if (min === max) {
        const pad = Math.abs(min) * 0.1 || 1;
        return [min >= 0 ? Math.max(0, min - pad) : min - pad, max + pad];
      }
      const [lo, hi] = uPlot.rangeNum(min, max, 0.1, true);
      return [min >= 0 ? Math.max(0, lo!) : lo, hi];
    };
    const yValues = (_u: uPlot, splits: number[]) => {
      const span = Math.max(...splits) - Math.min(...splits);
      const digits = span === 0 ? 2 : Math.max(0, Math.min(6, 2 - Math.floor(Math.log10(span))));
      return splits.map((v) => (Math.abs(v) >= 1e4 ? v.toExponential(1) : v.toFixed(digits)));
    };
    // A fraction its summary card shows in percent reads in percent on its axis too.
    const percentValues = (u: uPlot, splits: number[]) =>
      yValues(
        u,
        splits.map((v) => v * 100),
      ).map((t) => `${t}%`);
    // One legend for the jobs, when there are several: each chart's legend then shows only values.
    if (this.#series.length > 1) {
      this.#root.append(
        h(
          'p',
          { class: 'chart-legend', id: 'chart-legend' },
          this.#series.map((s, i) =>
            h(
              'span',
              { class: 'key', 'data-job': s.label },
              h('i', { style: `background:${colors[i % colors.length]}` }),
              s.label,
            ),
          ),
        ),
      );
    }
    for (const group of groups) {
      const box = h('div', { class: 'chart-group', 'data-group': group.title });
      this.#root.append(h('h3', {}, group.title), box);
      for (const name of group.names) {
        const m = this.#layoutOf.multi[name];
        const fig = h(
          'figure',
          { class: m ? 'chart' : 'chart by-job', 'data-metric': name },
          h('figcaption', {}, m ? m.title : name),
        );
        box.append(fig);
        const plot = new uPlot(
          {
            width: this.#width(),
            height: 180,
            scales: { x: { time: false }, y: { range: yRange } },
            // The y range shown, on the figure (for a reader of the page without the canvas).
            hooks: {
              setScale: [
                (u, key) => {
                  if (key === 'y') fig.dataset.yRange = `${u.scales.y!.min} ${u.scales.y!.max}`;
                },
              ],
            },
            axes: [
              xAxis,
              { ...axis, size: 64, values: this.#percent.has(name) ? percentValues : yValues },
            ],
            cursor: { drag: { x: true, y: false } },
            legend: { show: true, live: true },
            series: [
              { label: xLabels[this.#x].legend },
              ...(m
                ? this.#members(name).map((mm, i) => ({
                    label: mm,
                    stroke: groupColors[i % groupColors.length],
                    width: 1.5,
                    spanGaps: true,
                    points: { show: fewPoints },
                  }))
                : this.#series.map((s, i) => ({
                    label: s.label,
                    stroke: colors[i % colors.length],
                    width: 1.5,
                    spanGaps: true,
                    points: { show: fewPoints },
                  }))),
            ],
          },
          this.#dataFor(name),
          fig,
        );
        this.#plots.set(name, plot);
      }
    }
    if (constant.length) {
      this.#root.append(
        h(
          'details',
          { class: 'constant', id: 'constant-metrics' },
          h(
            'summary',
            {},
            `${constant.length} metric${constant.length === 1 ? '' : 's'} ${
              this.#state.live
                ? 'unchanged so far (each is charted once it changes)'
                : 'never changed (not charted)'
            }`,
          ),
          h(
            'p',
            {},
            constant.map(([k, v]) =>
              h('code', { 'data-metric': k }, `${k} = ${+v.toPrecision(6)}`),
            ),
          ),
        ),
      );
    }
  }
}
