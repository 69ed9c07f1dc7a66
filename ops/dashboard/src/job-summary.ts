/**
 * The top of a job page, read at a glance: progress (step k/N, ETA), the cards the job's report
 * declares (a metric's first → last value, counters of what went wrong), where the run writes; and
 * the Config tab's table of every effective setting with the defaults marked.
 *
 * @module
 */
import { duration } from '../../../runtime/format.ts';
import type { ConfigRow, JobInfo } from './api.ts';
import { bar, h } from './dom.ts';

/** First and last value of each metric, by name, its points and last step (from the charts' data). */
export type MetricEnds = (
  name: string,
) => { first: number; last: number; points: number; lastStep: number } | undefined;

/** The metrics a job's summary cards show in percent (their charts' axes then read in percent). */
export function percentMetrics(j: JobInfo): string[] {
  return (j.report?.summary ?? []).flatMap((c) =>
    c.format === 'percent' && c.metric !== undefined ? [c.metric] : [],
  );
}

const pct = (x: number) => `${(x * 100).toFixed(1)}%`;
const num = (x: number) =>
  Math.abs(x) >= 100 || Number.isInteger(x) ? String(Math.round(x * 100) / 100) : x.toFixed(3);

/** The summary cards of a job. */
export function jobSummary(j: JobInfo, ends: MetricEnds): HTMLElement {
  const p = j.progress;
  const cards: HTMLElement[] = [];
  const card = (id: string, title: string, ...body: (Node | string)[]) =>
    cards.push(h('div', { class: 'card', id }, h('h2', {}, title), ...body));
  if (p?.step !== null && p?.step !== undefined) {
    const total = p.totalSteps;
    const text = total ? `step ${p.step} / ${total}` : `step ${p.step}`;
    const when =
      j.status === 'RUNNING' && p.etaMs !== null
        ? `ETA ${duration(p.etaMs)}`
        : j.startedAt
          ? `ran ${duration((j.endedAt ?? Date.now()) - j.startedAt)}`
          : '';
    // The job's verdict on its ledger, short (the whole line on hover; `rtjob ledger JOB`).
    const l = j.report?.ledger;
    const books = l
      ? [
          h(
            'p',
            { id: 'sum-ledger', class: l.ok ? 'muted' : 'error', title: l.verdict },
            l.short ?? l.verdict,
          ),
        ]
      : [];
    card(
      'sum-progress',
      'Progress',
      total ? bar('steps', p.step, total, text) : h('p', { class: 'big' }, text),
      h('p', { class: 'muted' }, when),
      ...books,
    );
  }
  for (const c of j.report?.summary ?? []) {
    const id = `sum-${c.id}`;
    const ends1 = c.metric === undefined ? undefined : ends(c.metric);
    if (ends1) {
      const f = c.format === 'percent' ? pct : num;
      // One value (a running job's step-0 eval) is no change: the value and its step.
      card(
        id,
        c.title,
        ends1.points > 1
          ? h('p', { class: 'big' }, `${f(ends1.first)} → ${f(ends1.last)}`)
          : h(
              'p',
              { class: 'big' },
              f(ends1.last),
              ' ',
              h('span', { class: 'muted' }, `at step ${ends1.lastStep}`),
            ),
      );
    }
    const counts = (c.counts ?? []).map((k) => ({ ...k, n: ends(k.metric)?.last }));
    const first = counts[0]?.n;
    if (first !== undefined) {
      const parts = counts
        .filter((k, i) => k.n !== undefined && (i === 0 || k.n !== 0))
        .map((k) => `${k.n} ${k.n === 1 ? k.one : k.many}`);
      card(id, c.title, h('p', { class: first ? 'error' : '' }, parts.join(' · ')));
    }
  }
  // A run that ended early wrote only what it saved on the way: its checkpoints, if any.
  const early = j.status === 'FAILED' || j.status === 'STOPPED';
  const outputs = Object.entries(j.report?.outputs ?? {}).filter(
    ([k]) => !early || (k === 'checkpoints' && j.report?.checkpoint),
  );
  if (outputs.length) {
    card(
      'sum-outputs',
      early ? 'Saved' : 'Writes to',
      h(
        'dl',
        { class: 'compact' },
        outputs.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, h('code', {}, v))]),
      ),
    );
  }
  return h('div', { class: 'cards summary' }, cards);
}

/** Every effective setting, by section; changed ones first in each section and marked. */
export function configTable(rows: ConfigRow[], onlyChanged: boolean): HTMLElement {
  const shown = onlyChanged ? rows.filter((r) => r.source !== 'default') : rows;
  if (shown.length === 0)
    return h(
      'p',
      { class: 'muted' },
      onlyChanged ? 'Every setting has its default.' : 'This job reported no settings.',
    );
  const sections = new Map<string, ConfigRow[]>();
  for (const r of shown)
    sections.set(r.section ?? '', [...(sections.get(r.section ?? '') ?? []), r]);
  return h(
    'div',
    { class: 'scroll' },
    h(
      'table',
      { class: 'config' },
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          h('th', {}, 'Setting'),
          h('th', {}, 'Value'),
          h('th', {}, 'Default'),
          h('th', {}, 'From'),
        ),
      ),
      [...sections].map(([section, list]) =>
        h(
          'tbody',
          {},
          section ? h('tr', { class: 'section' }, h('th', { colspan: 4 }, section)) : null,
          [...list]
            .sort((a, b) => Number(a.source === 'default') - Number(b.source === 'default'))
            .map((r) =>
              h(
                'tr',
                { 'data-setting': r.name, 'data-source': r.source, title: r.help ?? '' },
                h('td', {}, h('code', {}, r.name)),
                h('td', {}, h('code', {}, r.value === '' ? '–' : r.value)),
                h(
                  'td',
                  { class: 'muted' },
                  r.source === 'default'
                    ? '(default)'
                    : h('code', {}, r.default === '' || r.default === undefined ? '–' : r.default),
                ),
                h('td', {}, r.source),
              ),
            ),
        ),
      ),
    ),
  );
}

/** The settings that differ between jobs (the first is the page's job), one column per job. */
export function diffTable(jobs: JobInfo[]): HTMLElement {
  const values = jobs.map((j) => new Map((j.report?.config ?? []).map((r) => [r.name, r.value])));
  const names = [...new Set(values.flatMap((m) => [...m.keys()]))].filter(
    (n) => new Set(values.map((m) => m.get(n) ?? '–')).size > 1,
  );
  const entry = (j: JobInfo) => j.entrypoint.join(' ');
  const entryDiffers = new Set(jobs.map(entry)).size > 1;
  if (names.length === 0 && !entryDiffers)
    return h('p', { class: 'muted', id: 'diff-none' }, 'Same settings.');
  return h(
    'div',
    { class: 'scroll' },
    h(
      'table',
      { class: 'config diff' },
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          h('th', {}, 'Setting'),
          jobs.map((j) => h('th', {}, j.jobId)),
        ),
      ),
      h(
        'tbody',
        {},
        names.map((n) =>
          h(
            'tr',
            { 'data-setting': n },
            h('td', {}, h('code', {}, n)),
            values.map((m) => h('td', {}, h('code', {}, m.get(n) ?? '–'))),
          ),
        ),
        entryDiffers
          ? h(
              'tr',
              { 'data-setting': 'entrypoint' },
              h('td', {}, 'entrypoint'),
              jobs.map((j) => h('td', {}, h('code', {}, entry(j)))),
            )
          : null,
      ),
    ),
  );
}
