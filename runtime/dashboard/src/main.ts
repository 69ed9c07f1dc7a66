/**
 * The dashboard: a hash router over four views (cluster, jobs, job, actors, actor), refreshed by
 * live events from the head. Every table the server can page is paged on the server.
 *
 * @module
 */
import {
  type ActorPageQuery,
  type ActorSortKey,
  type ActorView,
  api,
  connectLive,
  type JobInfo,
  logTailPath,
  onLive,
} from './api.ts';
import { MetricCharts } from './charts.ts';
import { bytes, duration } from '../../format.ts';
import { badge, bar, confirmAction, h, time, toast } from './dom.ts';

const main = document.getElementById('main') as HTMLElement;
/** Cleanup of the current view (timers, sockets, subscriptions). */
let teardown: (() => void)[] = [];

function route(): void {
  for (const f of teardown) f();
  teardown = [];
  const parts = location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  for (const a of Array.from(document.querySelectorAll('header nav a'))) {
    const target = (a as HTMLAnchorElement).hash.replace(/^#\/?/, '');
    a.toggleAttribute('aria-current', (parts[0] ?? '') === target);
  }
  main.replaceChildren();
  const [view, id] = parts;
  const done =
    view === 'jobs' && id ? jobView(id) : view === 'jobs' ? jobsView() : view === 'actors' && id ? actorView(id) : view === 'actors' ? actorsView() : clusterView();
  done.catch((err: Error) => main.replaceChildren(h('p', { class: 'error', role: 'alert' }, `Could not load: ${err.message}`)));
}

/** Re-runs `load` on the events named, at most every `minMs`. */
function refreshOn(events: string[], load: () => Promise<void>, match: (data: unknown) => boolean = () => true, minMs = 500): void {
  let timer: ReturnType<typeof setTimeout> | undefined;
  let last = 0;
  const off = onLive((event, data) => {
    if (!events.includes(event) || !match(data) || timer) return;
    timer = setTimeout(() => {
      timer = undefined;
      last = Date.now();
      void load().catch(() => undefined);
    }, Math.max(0, minMs - (Date.now() - last)));
  });
  teardown.push(off, () => timer && clearTimeout(timer));
}

function jobLink(id: string): HTMLElement {
  return h('a', { href: `#/jobs/${encodeURIComponent(id)}` }, id);
}

function jobDuration(j: JobInfo): string {
  return j.startedAt ? duration((j.endedAt ?? Date.now()) - j.startedAt) : '–';
}

// ---- cluster ---------------------------------------------------------------------------------

async function clusterView(): Promise<void> {
  const section = h('section', { 'aria-labelledby': 'cluster-h' });
  main.append(h('h1', { id: 'cluster-h' }, 'Cluster'), section);
  const load = async () => {
    const [s, jobs] = await Promise.all([
      api.call('GET /api/cluster'),
      api.call('GET /api/jobs', { query: { limit: 8 } }),
    ]);
    const count = (m: Record<string, number>) => Object.entries(m).map(([k, v]) => `${v} ${k.toLowerCase()}`).join(' · ') || 'none';
    section.replaceChildren(
      h('div', { class: 'cards' },
        h('div', { class: 'card' }, h('h2', {}, 'Nodes'), h('p', { class: 'big' }, s.nodes.filter((n) => n.state === 'ALIVE').length)),
        h('div', { class: 'card' }, h('h2', {}, 'Actors'), h('p', {}, count(s.actorsByState))),
        h('div', { class: 'card' }, h('h2', {}, 'Jobs'), h('p', {}, count(s.jobsByStatus))),
      ),
      h('h2', {}, 'Nodes'),
      h('table', { class: 'nodes' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Node'), h('th', {}, 'State'), h('th', {}, 'Resources'), h('th', {}, 'Workers'))),
        h('tbody', {}, s.nodes.map((n) => {
          const resources = Object.keys(n.resourcesTotal).map((k) => {
            const total = n.resourcesTotal[k] ?? 0;
            const used = total - (n.resourcesAvailable[k] ?? total);
            return bar(k, used, total, `${+used.toFixed(2)} / ${total}`);
          });
          resources.push(bar('Memory', n.memoryUsedBytes, n.memoryTotalBytes, `${bytes(n.memoryUsedBytes)} / ${bytes(n.memoryTotalBytes)}`));
          return h('tr', { 'data-node': n.nodeId },
            h('td', {}, h('strong', {}, n.hostname), h('br'), h('code', {}, n.nodeId), n.isHead ? h('span', { class: 'tag' }, 'head') : null),
            h('td', {}, badge(n.state)),
            h('td', { class: 'resources' }, resources),
            h('td', {}, n.workers));
        })),
      ),
      h('h2', {}, 'Recent jobs'),
      jobsTable(jobs.jobs),
    );
  };
  await load();
  refreshOn(['cluster', 'job'], load, () => true, 1000);
  const timer = setInterval(() => void load().catch(() => undefined), 5000);
  teardown.push(() => clearInterval(timer));
}

// ---- jobs ------------------------------------------------------------------------------------

function jobsTable(jobs: JobInfo[]): HTMLElement {
  if (jobs.length === 0) return h('p', { class: 'muted' }, 'No jobs yet. Submit one with rtjob submit -- train_ppo …');
  return h('table', { class: 'jobs' },
    h('thead', {}, h('tr', {}, h('th', {}, 'Job'), h('th', {}, 'Status'), h('th', {}, 'Entrypoint'), h('th', {}, 'Submitted'), h('th', {}, 'Duration'))),
    h('tbody', {}, jobs.map((j) =>
      h('tr', { 'data-job': j.jobId },
        h('td', {}, jobLink(j.jobId)),
        h('td', {}, badge(j.status)),
        h('td', {}, h('code', {}, j.entrypoint.join(' '))),
        h('td', {}, time(j.submittedAt)),
        h('td', {}, jobDuration(j))))),
  );
}

async function jobsView(): Promise<void> {
  const section = h('section', {});
  main.append(h('h1', {}, 'Jobs'), section);
  const load = async () => {
    const { jobs } = await api.call('GET /api/jobs');
    section.replaceChildren(jobsTable(jobs));
  };
  await load();
  refreshOn(['job'], load);
}

function maskEnv(k: string, v: string): string {
  return /TOKEN|SECRET|PASSWORD|KEY|CREDENTIAL/i.test(k) ? '••••••' : v;
}

async function jobView(jobId: string): Promise<void> {
  const header = h('div', { class: 'job-header' });
  const config = h('section', { 'aria-label': 'Configuration' });
  const compareSel = h('select', { id: 'compare', 'aria-label': 'Compare with job' });
  const chartsBox = h('div', { class: 'charts' });
  const actorsBox = h('section', { 'aria-label': 'Actors' });
  const logPre = h('pre', { class: 'log', tabindex: 0, 'aria-label': 'Driver log', 'aria-live': 'off' });
  const follow = h('input', { type: 'checkbox', id: 'follow', checked: true });
  main.append(
    h('p', {}, h('a', { href: '#/jobs' }, '← Jobs')),
    header,
    h('h2', {}, 'Training'),
    h('div', { class: 'toolbar' }, h('label', { for: 'compare' }, 'Compare with '), compareSel, h('span', { class: 'muted' }, ' drag on a chart to zoom, double-click to reset')),
    chartsBox,
    h('div', { class: 'two' },
      h('div', {}, h('h2', {}, 'Logs ', h('label', { class: 'small' }, follow, ' follow')), logPre),
      h('div', {}, h('h2', {}, 'Actors by role'), actorsBox, h('h2', {}, 'Config'), config)),
  );

  const renderHeader = (j: JobInfo) => {
    const stop = h('button', { class: 'danger', id: 'stop-job', disabled: !['PENDING', 'RUNNING'].includes(j.status) }, 'Stop job');
    stop.addEventListener('click', async () => {
      if (!(await confirmAction(`Stop job ${j.jobId}? Its driver gets SIGTERM, then SIGKILL; its actors are killed.`))) return;
      stop.setAttribute('disabled', '');
      await api
        .call('POST /api/jobs/:jobId/stop', { params: { jobId: j.jobId }, query: { wait: 0 } })
        .catch((e: Error) => toast(e.message));
    });
    header.replaceChildren(
      h('h1', {}, j.jobId, ' ', h('span', { id: 'job-status' }, badge(j.status))),
      h('p', {}, h('code', {}, j.entrypoint.join(' ')), ` · submitted ${time(j.submittedAt)} · ran ${jobDuration(j)}`, j.exitCode !== null ? ` · exit code ${j.exitCode}` : ''),
      j.message ? h('pre', { class: j.status === 'FAILED' ? 'message error' : 'message' }, j.message) : '',
      stop,
    );
    config.replaceChildren(
      h('dl', {},
        h('dt', {}, 'Entrypoint'), h('dd', {}, h('code', {}, j.entrypoint.join(' '))),
        h('dt', {}, 'Working dir'), h('dd', {}, j.workingDir ?? j.metadata.cwd ?? '–'),
        h('dt', {}, 'Entrypoint resources'), h('dd', {}, `${j.entrypointNumCpus} CPU, ${j.entrypointNumGpus} GPU`),
        h('dt', {}, 'Env'), h('dd', {}, Object.keys(j.env).length ? h('ul', { class: 'env' }, Object.entries(j.env).map(([k, v]) => h('li', {}, h('code', {}, `${k}=${maskEnv(k, v)}`)))) : '–',
          j.inheritedEnvCount ? h('p', { class: 'muted', id: 'env-rest' }, `+ ${j.inheritedEnvCount} more inherited variable${j.inheritedEnvCount === 1 ? '' : 's'} (not shown)`) : ''),
      ),
    );
  };
  const getJob = () => api.call('GET /api/jobs/:jobId', { params: { jobId } });
  const job = await getJob();
  renderHeader(job);
  refreshOn(['job'], async () => renderHeader(await getJob()), (d) => (d as JobInfo).jobId === jobId, 200);

  // Charts, with incremental fetches on each metrics event.
  const charts = new MetricCharts(chartsBox);
  teardown.push(() => charts.destroy());
  let compared: string | null = null;
  const fetchInto = async (index: number, id: string) => {
    // The API pages long runs; read pages until the last (each appends to the charts).
    for (let page = 0; page < 10_000; page++) {
      const since = charts.lastStep(index);
      const query = Number.isFinite(since) ? { sinceStep: since } : {};
      const t = await api.call('GET /api/jobs/:jobId/metrics', { params: { jobId: id }, query });
      if (t.rows.length > 0 || !Number.isFinite(since)) charts.append(index, t);
      if (t.nextSinceStep === null || t.rows.length === 0) return;
    }
  };
  const setJobs = async () => {
    charts.setJobs(compared ? [jobId, compared] : [jobId]);
    await fetchInto(0, jobId);
    if (compared) await fetchInto(1, compared);
  };
  await setJobs();
  const { jobs } = await api.call('GET /api/jobs');
  compareSel.append(h('option', { value: '' }, '(none)'), ...jobs.filter((j) => j.jobId !== jobId).map((j) => h('option', { value: j.jobId }, `${j.jobId} (${j.status})`)));
  compareSel.addEventListener('change', () => {
    compared = compareSel.value || null;
    void setJobs();
  });
  refreshOn(['metrics'], async () => {
    await fetchInto(0, jobId);
    if (compared) await fetchInto(1, compared);
  }, (d) => [jobId, compared].includes((d as { jobId: string }).jobId), 250);
  const onResize = () => charts.resize();
  addEventListener('resize', onResize);
  teardown.push(() => removeEventListener('resize', onResize));

  // Live log over the WebSocket tail; the server closes it when the job ends.
  const maxLogChars = 400_000;
  const ws = new WebSocket(`${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}${logTailPath(jobId)}`);
  ws.onmessage = (e) => {
    let text = (logPre.textContent ?? '') + String(e.data);
    if (text.length > maxLogChars) text = '…\n' + text.slice(-maxLogChars);
    logPre.textContent = text;
    if ((follow as HTMLInputElement).checked) logPre.scrollTop = logPre.scrollHeight;
  };
  teardown.push(() => ws.close());

  // Actors of the job grouped by class (its role).
  const loadActors = async () => {
    const page = await api.call('GET /api/jobs/:jobId/actors', {
      params: { jobId },
      query: { limit: 1000, sort: 'className', order: 'asc' },
    });
    if (page.rows.length === 0) {
      actorsBox.replaceChildren(h('p', { class: 'muted' }, 'No actors.'));
      return;
    }
    const roles = new Map<string, ActorView[]>();
    for (const a of page.rows) roles.set(a.className, [...(roles.get(a.className) ?? []), a]);
    actorsBox.replaceChildren(
      ...[...roles].map(([role, list]) =>
        h('details', { open: true },
          h('summary', {}, `${role} (${list.length})`),
          h('ul', {}, list.map((a) => h('li', {}, h('a', { href: `#/actors/${encodeURIComponent(a.actorId)}` }, a.name ?? a.actorId), ' ', badge(a.state)))))),
    );
  };
  await loadActors();
  refreshOn(['cluster'], loadActors, () => true, 1000);
}

// ---- actors ----------------------------------------------------------------------------------

/** The actor table's columns; each sorts on the server by its key. */
const actorColumns: [ActorSortKey, string][] = [
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

async function actorsView(): Promise<void> {
  const q: Required<Pick<ActorPageQuery, 'offset' | 'limit' | 'sort' | 'order'>> & { state: string; q: string } =
    { offset: 0, limit: 50, sort: 'startedAt', order: 'desc', state: '', q: '' };
  const search = h('input', { type: 'search', id: 'actor-q', placeholder: 'id, class or name', 'aria-label': 'Filter actors' });
  const stateSel = h('select', { id: 'actor-state', 'aria-label': 'State' },
    ...['', 'PENDING', 'ALIVE', 'RESTARTING', 'DEAD'].map((s) => h('option', { value: s }, s || 'any state')));
  const body = h('div', {});
  const pager = h('div', { class: 'pager' });
  main.append(h('h1', {}, 'Actors'), h('div', { class: 'toolbar' }, search, stateSel), body, pager);
  const load = async () => {
    const page = await api.call('GET /api/actors', {
      query: { ...q, state: (q.state || undefined) as ActorPageQuery['state'], q: q.q || undefined },
    });
    const now = Date.now();
    const head = h('tr', {}, actorColumns.map(([key, label]) => {
      const sorted = q.sort === key;
      const btn = h('button', { class: 'sort', 'data-sort': key }, label, sorted ? (q.order === 'asc' ? ' ▲' : ' ▼') : '');
      btn.addEventListener('click', () => {
        q.order = sorted && q.order === 'desc' ? 'asc' : 'desc';
        q.sort = key;
        void load();
      });
      return h('th', { 'aria-sort': sorted ? (q.order === 'asc' ? 'ascending' : 'descending') : 'none' }, btn);
    }), h('th', {}, 'Death cause'), h('th', {}, h('span', { class: 'sr-only' }, 'Actions')));
    body.replaceChildren(
      h('table', { class: 'actors' }, h('thead', {}, head),
        h('tbody', {}, page.rows.map((a) => h('tr', { 'data-actor': a.actorId },
          h('td', {}, h('a', { href: `#/actors/${encodeURIComponent(a.actorId)}` }, h('code', {}, a.actorId))),
          h('td', {}, a.className),
          h('td', {}, a.name ?? ''),
          h('td', {}, badge(a.state)),
          h('td', {}, a.nodeId ?? ''),
          h('td', {}, a.pid ?? ''),
          h('td', {}, a.jobId ? jobLink(a.jobId) : ''),
          h('td', {}, a.restarts),
          h('td', {}, a.startedAt && a.state !== 'DEAD' ? duration(now - a.startedAt) : '–'),
          h('td', { class: 'cause' }, a.deathCause ?? ''),
          h('td', {}, actorActions(a, load)))))),
    );
    const last = Math.min(page.offset + page.limit, page.total);
    const prev = h('button', { disabled: page.offset === 0 }, '← Previous');
    const next = h('button', { disabled: last >= page.total }, 'Next →');
    prev.addEventListener('click', () => { q.offset = Math.max(0, q.offset - q.limit); void load(); });
    next.addEventListener('click', () => { q.offset += q.limit; void load(); });
    pager.replaceChildren(prev, h('span', { id: 'actor-range' }, ` ${page.total ? page.offset + 1 : 0}–${last} of ${page.total} `), next);
  };
  let typing: ReturnType<typeof setTimeout> | undefined;
  search.addEventListener('input', () => {
    clearTimeout(typing);
    typing = setTimeout(() => { q.q = (search as HTMLInputElement).value; q.offset = 0; void load(); }, 200);
  });
  stateSel.addEventListener('change', () => { q.state = (stateSel as HTMLSelectElement).value; q.offset = 0; void load(); });
  await load();
  refreshOn(['cluster'], load, () => true, 1000);
}

function actorActions(a: ActorView, after: () => Promise<void>): HTMLElement {
  const kill = h('button', { class: 'danger small', disabled: a.state === 'DEAD' }, 'Kill');
  kill.addEventListener('click', async () => {
    if (!(await confirmAction(`Kill actor ${a.name ?? a.actorId} (${a.className})? It will not be restarted.`))) return;
    await api
      .call('POST /api/actors/:actorId/kill', { params: { actorId: a.actorId }, body: { noRestart: true } })
      .catch((e: Error) => toast(e.message));
    await after();
  });
  const restart = h('button', { class: 'small', disabled: a.state === 'DEAD' }, 'Restart');
  restart.addEventListener('click', async () => {
    if (!(await confirmAction(`Restart actor ${a.name ?? a.actorId}? Its process is killed and its constructor runs again.`))) return;
    await api
      .call('POST /api/actors/:actorId/restart', { params: { actorId: a.actorId } })
      .catch((e: Error) => toast(e.message));
    await after();
  });
  return h('span', { class: 'actions' }, kill, ' ', restart);
}

async function actorView(actorId: string): Promise<void> {
  const info = h('section', {});
  const logPre = h('pre', { class: 'log', tabindex: 0, 'aria-label': 'Actor log' });
  main.append(h('p', {}, h('a', { href: '#/actors' }, '← Actors')), info, h('h2', {}, 'Logs'), logPre);
  const load = async () => {
    const a = await api.call('GET /api/actors/:actorId', { params: { actorId } });
    info.replaceChildren(
      h('h1', {}, a.name ?? a.actorId, ' ', badge(a.state)),
      h('dl', {},
        h('dt', {}, 'Id'), h('dd', {}, h('code', {}, a.actorId)),
        h('dt', {}, 'Class'), h('dd', {}, a.className),
        h('dt', {}, 'Job'), h('dd', {}, a.jobId ? jobLink(a.jobId) : '–'),
        h('dt', {}, 'Node / PID'), h('dd', {}, `${a.nodeId ?? '–'} / ${a.pid ?? '–'}`),
        h('dt', {}, 'Restarts'), h('dd', {}, a.restarts),
        h('dt', {}, 'Started'), h('dd', {}, time(a.startedAt)),
        h('dt', {}, 'Death cause'), h('dd', {}, a.deathCause ?? '–')),
      actorActions(a, load),
    );
  };
  await load();
  // The cursor holds one offset per log file (stdout and stderr of every incarnation).
  let cursor = '';
  const maxLogChars = 400_000;
  const poll = async () => {
    const r = await api.call('GET /api/actors/:actorId/logs', { params: { actorId }, query: { cursor } });
    if (r.logs) {
      let text = (logPre.textContent ?? '') + r.logs;
      if (text.length > maxLogChars) text = '…\n' + text.slice(-maxLogChars);
      logPre.textContent = text;
      logPre.scrollTop = logPre.scrollHeight;
    }
    cursor = r.cursor;
  };
  await poll();
  const timer = setInterval(() => void poll().catch(() => undefined), 1000);
  teardown.push(() => clearInterval(timer));
  refreshOn(['cluster'], load, () => true, 1000);
}

const live = document.getElementById('live') as HTMLElement;
connectLive((ok) => {
  live.textContent = ok ? '● live' : '○ reconnecting…';
  live.dataset.ok = String(ok);
});
addEventListener('hashchange', route);
route();
