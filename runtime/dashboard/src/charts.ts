/**
 * Training charts: one small uPlot chart per metric, with a second series when a job is compared.
 * Drag to zoom a range, double-click to reset. Data arrives incrementally (`append`), so a job
 * that logs a row every step for hours only ever sends the new rows.
 *
 * @module
 */
import uPlot from 'uplot';

import type { MetricsTable } from './api.ts';
import { h } from './dom.ts';

/** Metrics shown first, in this order (train_ppo's names); the rest follow alphabetically. */
const preferred = [
  'reward_mean',
  'eval_accuracy',
  'kl',
  'policy_loss',
  'value_loss',
  'loss',
  'entropy',
  'tokens_per_s',
  'step_time_split',
  'step_s',
  'staleness_mean',
  'staleness_max',
  'buffer_fill',
  'pass_rate',
  'response_length',
];

/**
 * Metrics drawn together on one chart of the page's job (one line each), instead of one chart
 * per metric: the step time split into its phases.
 */
const groups: Record<string, { title: string; members: string[] }> = {
  step_time_split: {
    title: 'step time split (s): generate / experience / train / sync',
    members: ['generate_s', 'experience_s', 'train_s', 'weight_sync_s', 'time_generate', 'time_train', 'time_sync'],
  },
};
const grouped = new Set(Object.values(groups).flatMap((g) => g.members));

const colors = ['#3b82f6', '#f97316'];
const groupColors = ['#3b82f6', '#a855f7', '#f97316', '#10b981', '#ef4444', '#eab308', '#64748b'];

/** Rows of one job keyed by step, one map per metric. */
class Series {
  readonly byMetric = new Map<string, Map<number, number | null>>();
  lastStep = -Infinity;

  add(t: MetricsTable): void {
    const stepIdx = t.columns.indexOf('step');
    for (const row of t.rows) {
      const step = row[stepIdx] as number;
      if (step > this.lastStep) this.lastStep = step;
      t.columns.forEach((c, i) => {
        if (c === 'step' || c === 'time') return;
        let m = this.byMetric.get(c);
        if (!m) this.byMetric.set(c, (m = new Map()));
        m.set(step, row[i] ?? null);
      });
    }
  }
}

/** The charts of a job page. */
export class MetricCharts {
  readonly #root: HTMLElement;
  readonly #series: { label: string; data: Series }[] = [];
  readonly #plots = new Map<string, uPlot>();

  constructor(root: HTMLElement) {
    this.#root = root;
  }

  /** Sets the jobs shown (first = the page's job, second = compared job). */
  setJobs(labels: string[]): void {
    this.#series.length = 0;
    for (const label of labels) this.#series.push({ label, data: new Series() });
    this.#reset();
  }

  /** Adds rows for job `index`; returns the last step it now has (for `sinceStep`). */
  append(index: number, t: MetricsTable): number {
    const s = this.#series[index];
    if (!s) return -Infinity;
    const before = this.#layout();
    s.data.add(t);
    const names = this.#names();
    if (this.#layout() !== before) this.#reset();
    else for (const n of names) this.#plots.get(n)?.setData(this.#dataFor(n));
    return s.data.lastStep;
  }

  lastStep(index: number): number {
    return this.#series[index]?.data.lastStep ?? -Infinity;
  }

  /** Resizes charts to their container (window resize). */
  resize(): void {
    for (const [, p] of this.#plots) p.setSize({ width: this.#width(), height: 180 });
  }

  destroy(): void {
    for (const p of this.#plots.values()) p.destroy();
    this.#plots.clear();
  }

  /** Chart names: metrics, with grouped ones replaced by their group. */
  #names(): string[] {
    const all = new Set<string>();
    for (const s of this.#series) {
      for (const k of s.data.byMetric.keys()) {
        const group = grouped.has(k) ? Object.keys(groups).find((g) => groups[g]!.members.includes(k)) : undefined;
        all.add(group ?? k);
      }
    }
    return [...all].sort((a, b) => {
      const ia = preferred.indexOf(a);
      const ib = preferred.indexOf(b);
      if (ia >= 0 || ib >= 0) return (ia < 0 ? 1e9 : ia) - (ib < 0 ? 1e9 : ib);
      return a < b ? -1 : 1;
    });
  }

  /** Which charts exist with which lines; a change rebuilds the charts. */
  #layout(): string {
    return this.#names().map((n) => (groups[n] ? `${n}(${this.#members(n).join(',')})` : n)).join(' ');
  }

  /** Members of a group that the page's job logged. */
  #members(name: string): string[] {
    const first = this.#series[0]?.data.byMetric;
    return (groups[name]?.members ?? []).filter((m) => first?.has(m));
  }

  #dataFor(name: string): uPlot.AlignedData {
    if (groups[name]) {
      const data = this.#series[0]?.data.byMetric;
      const members = this.#members(name);
      const steps = new Set<number>();
      for (const m of members) for (const k of data?.get(m)?.keys() ?? []) steps.add(k);
      const xs = [...steps].sort((a, b) => a - b);
      return [xs, ...members.map((m) => xs.map((x) => data?.get(m)?.get(x) ?? null))] as uPlot.AlignedData;
    }
    const steps = new Set<number>();
    for (const s of this.#series) for (const k of s.data.byMetric.get(name)?.keys() ?? []) steps.add(k);
    const xs = [...steps].sort((a, b) => a - b);
    const ys = this.#series.map((s) => {
      const m = s.data.byMetric.get(name);
      return xs.map((x) => m?.get(x) ?? null);
    });
    return [xs, ...ys] as uPlot.AlignedData;
  }

  #width(): number {
    const w = this.#root.clientWidth || 900;
    const cols = w > 1100 ? 3 : w > 700 ? 2 : 1;
    return Math.floor(w / cols) - 24;
  }

  #reset(): void {
    this.destroy();
    this.#root.replaceChildren();
    const names = this.#names();
    if (names.length === 0) {
      this.#root.append(h('p', { class: 'muted' }, 'No metrics yet. Log them from the driver with metrics.log(step, { reward_mean, kl, … }).'));
      return;
    }
    const dark = matchMedia('(prefers-color-scheme: dark)').matches;
    const axis = { stroke: dark ? '#c9d1d9' : '#374151', grid: { stroke: dark ? '#30363d' : '#e5e7eb' }, ticks: { stroke: dark ? '#30363d' : '#e5e7eb' } };
    for (const name of names) {
      const group = groups[name];
      const box = h('figure', { class: 'chart', 'data-metric': name }, h('figcaption', {}, group ? group.title : name));
      this.#root.append(box);
      const plot = new uPlot(
        {
          width: this.#width(),
          height: 180,
          // A flat series (a loss stuck at 0) gets a small range around its value, not 0–100.
          scales: { x: { time: false }, y: { range: (_u, min, max) => (min === max ? [min - 1, max + 1] : uPlot.rangeNum(min, max, 0.1, true)) } },
          axes: [axis, { ...axis, size: 60 }],
          cursor: { drag: { x: true, y: false } },
          legend: { show: group !== undefined || this.#series.length > 1 },
          series: [
            { label: 'step' },
            ...(group
              ? this.#members(name).map((m, i) => ({ label: m, stroke: groupColors[i % groupColors.length], width: 1.5, spanGaps: true, points: { show: false } }))
              : this.#series.map((s, i) => ({ label: s.label, stroke: colors[i % colors.length], width: 1.5, spanGaps: true, points: { show: false } }))),
          ],
        },
        this.#dataFor(name),
        box,
      );
      this.#plots.set(name, plot);
    }
  }
}
