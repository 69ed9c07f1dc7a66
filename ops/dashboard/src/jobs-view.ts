/**
 * The Jobs view: every job with its status, progress, headline metric and, for a failed one,
 * why it failed.
 *
 * @module
 */
import { api, type JobInfo } from './api.ts';
import { duration, failureReason } from '../../../runtime/format.ts';
import { badge, h, time } from './dom.ts';
import { main, refreshOn, jobLink, jobDuration } from './page.ts';

/** The line of a failed job's message that says why, cut to fit a table cell. */
function reasonCell(j: JobInfo): string {
  const line = failureReason(j.message);
  return line.length > 140 ? `${line.slice(0, 140)}…` : line;
}

function progressCell(j: JobInfo): HTMLElement | string {
  const p = j.progress;
  if (!p || p.step === null) return '–';
  const text = p.totalSteps ? `${p.step} / ${p.totalSteps}` : `step ${p.step}`;
  const eta = j.status === 'RUNNING' && p.etaMs !== null ? ` · ETA ${duration(p.etaMs)}` : '';
  return h('span', { class: 'progress' }, text, h('span', { class: 'muted' }, eta));
}

function headlineCell(j: JobInfo): HTMLElement | string {
  const hl = j.progress?.headline;
  if (!hl || hl.last === null) return '–';
  const f = (x: number) =>
    hl.name.includes('accuracy') ? `${(x * 100).toFixed(1)}%` : x.toFixed(3);
  return h(
    'span',
    {},
    h('span', { class: 'muted' }, `${hl.name} `),
    hl.first !== null && hl.first !== hl.last ? `${f(hl.first)} → ${f(hl.last)}` : f(hl.last),
  );
}

export function jobsTable(jobs: JobInfo[]): HTMLElement {
  if (jobs.length === 0)
    return h('p', { class: 'muted' }, 'No jobs yet. Submit one with rtjob submit -- train_ppo …');
  return h(
    'div',
    { class: 'scroll' },
    h(
      'table',
      { class: 'jobs' },
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          h('th', {}, 'Job'),
          h('th', {}, 'Status'),
          h('th', {}, 'Progress'),
          h('th', {}, 'Headline'),
          h('th', {}, 'Entrypoint'),
          h('th', {}, 'Submitted'),
          h('th', {}, 'Duration'),
        ),
      ),
      h(
        'tbody',
        {},
        jobs.map((j) =>
          h(
            'tr',
            { 'data-job': j.jobId },
            h('td', {}, jobLink(j.jobId)),
            h(
              'td',
              {},
              badge(j.status),
              j.status === 'FAILED' && j.message
                ? h('div', { class: 'reason error', title: j.message }, reasonCell(j))
                : null,
            ),
            h('td', {}, progressCell(j)),
            h('td', {}, headlineCell(j)),
            h('td', {}, h('code', {}, j.entrypoint.join(' '))),
            h('td', {}, time(j.submittedAt)),
            h('td', {}, jobDuration(j)),
          ),
        ),
      ),
    ),
  );
}

export async function jobsView(): Promise<void> {
  const section = h('section', {});
  main.append(h('h1', {}, 'Jobs'), section);
  const load = async () => {
    const { jobs } = await api.call('GET /api/jobs');
    section.replaceChildren(jobsTable(jobs));
  };
  await load();
  refreshOn(['job'], load);
}
