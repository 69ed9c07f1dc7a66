/**
 * One actor's page: its record and its worker's log, with the same actions as the Actors view.
 *
 * @module
 */
import { api } from './api.ts';
import { badge, h, time } from './dom.ts';
import { main, page, refreshOn, jobLink } from './page.ts';
import { actorActions, actorName, runningJobs } from './actors-view.ts';

export async function actorView(actorId: string): Promise<void> {
  const info = h('section', {});
  const logPre = h('pre', { class: 'log', tabindex: 0, 'aria-label': 'Actor log' });
  main.append(
    h('p', {}, h('a', { href: '#/actors' }, '← Actors')),
    info,
    h('h2', {}, 'Logs'),
    logPre,
  );
  const load = async () => {
    const [a, running] = await Promise.all([
      api.call('GET /api/actors/:actorId', { params: { actorId } }),
      runningJobs(),
    ]);
    info.replaceChildren(
      h('h1', {}, actorName(a) ?? a.actorId, ' ', badge(a.state)),
      h(
        'dl',
        {},
        h('dt', {}, 'Id'),
        h('dd', {}, h('code', {}, a.actorId)),
        h('dt', {}, 'Class'),
        h('dd', {}, a.className),
        h('dt', {}, 'Job'),
        h('dd', {}, a.jobId ? jobLink(a.jobId) : '–'),
        h('dt', {}, 'Node / PID'),
        h('dd', {}, `${a.nodeId ?? '–'} / ${a.pid ?? '–'}`),
        h('dt', {}, 'Restarts'),
        h('dd', {}, a.restarts),
        h('dt', {}, 'Started'),
        h('dd', {}, time(a.startedAt)),
        h('dt', {}, 'Death cause'),
        h('dd', {}, a.deathCause ?? '–'),
      ),
      actorActions(a, load, running),
    );
  };
  await load();
  // The cursor holds one offset per log file (stdout and stderr of every incarnation).
  let cursor = '';
  const maxLogChars = 400_000;
  const poll = async () => {
    const r = await api.call('GET /api/actors/:actorId/logs', {
      params: { actorId },
      query: { cursor },
    });
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
  page.teardown.push(() => clearInterval(timer));
  refreshOn(['cluster'], load, () => true, 1000);
}
