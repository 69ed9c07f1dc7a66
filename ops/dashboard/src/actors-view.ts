/**
 * The Actors view: every actor, paged, sorted and filtered on the server, with Restart and Kill
 * and what each does to the job the actor belongs to.
 *
 * @module
 */
import { type ActorPageQuery, type ActorView, api, type JobInfo } from './api.ts';
import { duration, resumeAdvice } from '../../../runtime/format.ts';
import { badge, confirmAction, h, toast } from './dom.ts';
import { main, page, readOnlyWhy, refreshOn, jobLink } from './page.ts';

/**
 * An actor's name as a table shows it: without its job's id in front (drivers scope names by job,
 * `job_…/trainer`, as names are unique in a cluster), so the role reads first.
 */
export function actorName(a: ActorView): string | null {
  if (a.name === null || a.name === undefined) return null;
  return a.jobId && a.name.startsWith(`${a.jobId}/`) ? a.name.slice(a.jobId.length + 1) : a.name;
}

const actorColumns: [keyof ActorView, string][] = [
  ['actorId', 'Actor'],
  ['className', 'Class'],
  ['name', 'Name'],
  ['state', 'State'],
  ['nodeId', 'Node'],
  ['pid', 'PID'],
  ['jobId', 'Job'],
  ['restarts', 'Restarts'],
  ['startedAt', 'Uptime'],
];

export async function actorsView(): Promise<void> {
  const q = { offset: 0, limit: 50, sort: 'startedAt', order: 'desc', state: '', q: '' };
  const search = h('input', {
    type: 'search',
    id: 'actor-q',
    placeholder: 'id, class or name',
    'aria-label': 'Filter actors',
  });
  const stateSel = h(
    'select',
    { id: 'actor-state', 'aria-label': 'State' },
    ...['', 'PENDING', 'ALIVE', 'RESTARTING', 'DEAD'].map((s) =>
      h('option', { value: s }, s || 'any state'),
    ),
  );
  const body = h('div', {});
  const pager = h('div', { class: 'pager' });
  main.append(h('h1', {}, 'Actors'), h('div', { class: 'toolbar' }, search, stateSel), body, pager);
  const load = async () => {
    const query: ActorPageQuery = {
      offset: q.offset,
      limit: q.limit,
      sort: q.sort as ActorPageQuery['sort'],
      order: q.order as 'asc' | 'desc',
    };
    if (q.state) query.state = q.state as ActorPageQuery['state'];
    if (q.q) query.q = q.q;
    const [page, running] = await Promise.all([
      api.call('GET /api/actors', { query }),
      runningJobs(),
    ]);
    const now = Date.now();
    const head = h(
      'tr',
      {},
      actorColumns.map(([key, label]) => {
        const sorted = q.sort === key;
        const btn = h(
          'button',
          { class: 'sort', 'data-sort': key },
          label,
          sorted ? (q.order === 'asc' ? ' ▲' : ' ▼') : '',
        );
        btn.addEventListener('click', () => {
          q.order = sorted && q.order === 'desc' ? 'asc' : 'desc';
          q.sort = key;
          void load();
        });
        return h(
          'th',
          { 'aria-sort': sorted ? (q.order === 'asc' ? 'ascending' : 'descending') : 'none' },
          btn,
        );
      }),
      h('th', {}, 'Death cause'),
      h('th', {}, h('span', { class: 'sr-only' }, 'Actions')),
    );
    body.replaceChildren(
      h(
        'div',
        { class: 'scroll' },
        h(
          'table',
          { class: 'actors' },
          h('thead', {}, head),
          h(
            'tbody',
            {},
            page.rows.map((a) =>
              h(
                'tr',
                { 'data-actor': a.actorId },
                h(
                  'td',
                  {},
                  h(
                    'a',
                    { href: `#/actors/${encodeURIComponent(a.actorId)}` },
                    h('code', {}, a.actorId),
                  ),
                ),
                h('td', {}, a.className),
                h('td', { class: 'name', title: a.name ?? '' }, actorName(a) ?? ''),
                h('td', {}, badge(a.state)),
                h('td', {}, a.nodeId ?? ''),
                h('td', {}, a.pid ?? ''),
                h('td', {}, a.jobId ? jobLink(a.jobId) : ''),
                h('td', {}, a.restarts),
                h('td', {}, a.startedAt && a.state !== 'DEAD' ? duration(now - a.startedAt) : '–'),
                h('td', { class: 'cause', title: a.deathCause ?? '' }, a.deathCause ?? ''),
                h('td', {}, actorActions(a, load, running)),
              ),
            ),
          ),
        ),
      ),
    );
    const last = Math.min(page.offset + page.limit, page.total);
    const prev = h('button', { disabled: page.offset === 0 }, '← Previous');
    const next = h('button', { disabled: last >= page.total }, 'Next →');
    prev.addEventListener('click', () => {
      q.offset = Math.max(0, q.offset - q.limit);
      void load();
    });
    next.addEventListener('click', () => {
      q.offset += q.limit;
      void load();
    });
    pager.replaceChildren(
      prev,
      h(
        'span',
        { id: 'actor-range' },
        ` ${page.total ? page.offset + 1 : 0}–${last} of ${page.total} `,
      ),
      next,
    );
  };
  let typing: ReturnType<typeof setTimeout> | undefined;
  search.addEventListener('input', () => {
    clearTimeout(typing);
    typing = setTimeout(() => {
      q.q = (search as HTMLInputElement).value;
      q.offset = 0;
      void load();
    }, 200);
  });
  stateSel.addEventListener('change', () => {
    q.state = (stateSel as HTMLSelectElement).value;
    q.offset = 0;
    void load();
  });
  await load();
  refreshOn(['cluster'], load, () => true, 1000);
}

/**
 * What killing or restarting `a` does to the job it belongs to, when that job is running: the fate
 * its driver reported for the actor's class (`report.roles`), and for a fatal one what the job
 * leaves to resume from, read now (a checkpoint may have been written since the page loaded).
 */
async function jobConsequence(
  a: ActorView,
  running: ReadonlyMap<string, JobInfo>,
): Promise<string> {
  if (!a.jobId || !running.has(a.jobId)) return '';
  const job = await api
    .call('GET /api/jobs/:jobId', { params: { jobId: a.jobId } })
    .catch(() => running.get(a.jobId!)!);
  const role = job.report?.roles?.[a.className];
  const fate = !role
    ? "whether the job goes on depends on its driver handling the actor's death"
    : role.fatal
      ? `${role.fate}: the job fails; ${resumeAdvice(job.report?.checkpoint, job.progress?.step ?? null)}`
      : role.fate;
  return ` It is the ${a.className} of running job ${a.jobId}: calls in flight to it fail; ${fate}.`;
}

/** Why Restart cannot work for `a`, or undefined when it can. */
function restartBlocked(a: ActorView): string | undefined {
  if (page.readOnly) return readOnlyWhy;
  if (a.state === 'DEAD') return 'the actor is dead';
  if (a.maxRestarts === undefined) return undefined;
  if (a.maxRestarts === 0)
    return 'it allows no restarts (maxRestarts 0): a restart would kill it for good';
  if (a.maxRestarts > 0 && a.restarts >= a.maxRestarts)
    return `it has used all ${a.maxRestarts} of its restarts: a restart would kill it for good`;
  return undefined;
}

export function actorActions(
  a: ActorView,
  after: () => Promise<void>,
  running: ReadonlyMap<string, JobInfo> = new Map(),
): HTMLElement {
  const name = `${actorName(a) ?? a.actorId} (${a.className})`;
  const kill = h(
    'button',
    {
      class: 'danger small',
      disabled: a.state === 'DEAD' || page.readOnly,
      title: page.readOnly ? readOnlyWhy : '',
    },
    'Kill',
  );
  kill.addEventListener('click', async () => {
    if (
      !(await confirmAction(
        `Kill ${name}? Its process is killed and it is not restarted.${await jobConsequence(a, running)}`,
      ))
    )
      return;
    await api
      .call('POST /api/actors/:actorId/kill', {
        params: { actorId: a.actorId },
        body: { noRestart: true },
      })
      .catch((e: Error) => toast(e.message));
    await after();
  });
  const blocked = restartBlocked(a);
  const restart = h(
    'button',
    {
      class: 'small',
      disabled: blocked !== undefined,
      title: blocked ? `Restart is off: ${blocked}` : '',
    },
    'Restart',
  );
  restart.addEventListener('click', async () => {
    const left =
      a.maxRestarts === undefined || a.maxRestarts < 0
        ? ''
        : ` (restart ${a.restarts + 1} of the ${a.maxRestarts} it allows)`;
    const text = `Restart ${name}? Its process is killed and the runtime starts a new one${left}: its constructor runs again and its in-memory state is lost.${await jobConsequence(a, running)}`;
    if (!(await confirmAction(text))) return;
    await api
      .call('POST /api/actors/:actorId/restart', { params: { actorId: a.actorId } })
      .catch((e: Error) => toast(e.message));
    await after();
  });
  return h(
    'span',
    { class: 'actions' },
    kill,
    ' ',
    restart,
    blocked && a.state !== 'DEAD' ? h('span', { class: 'muted small why' }, ` ${blocked}`) : null,
  );
}

/** The running jobs by id (for what a kill or restart does to them). */
export async function runningJobs(): Promise<Map<string, JobInfo>> {
  const { jobs } = await api.call('GET /api/jobs', { query: { limit: 200 } });
  return new Map(jobs.filter((j) => j.status === 'RUNNING').map((j) => [j.jobId, j]));
}
