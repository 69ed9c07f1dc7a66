/**
 * The dashboard: a hash router over five views (cluster, jobs, job, actors, actor), one file
 * each, refreshed by live events from the head. Every table the server can page is paged on the
 * server.
 *
 * @module
 */
import { api, connectLive } from './api.ts';
import { actorView } from './actor-view.ts';
import { actorsView } from './actors-view.ts';
import { clusterView } from './cluster-view.ts';
import { h } from './dom.ts';
import { jobView } from './job-view.ts';
import { jobsView } from './jobs-view.ts';
import { main, page } from './page.ts';

function route(): void {
  const parts0 = location.hash
    .replace(/^#\/?/, '')
    .split('/')
    .filter(Boolean)
    .map(decodeURIComponent);
  if (parts0[0] === 'jobs' && parts0[1] && page.jobPage?.jobId === parts0[1]) {
    page.jobPage.show(parts0[2]);
    return;
  }
  page.jobPage = null;
  for (const f of page.teardown) f();
  page.teardown = [];
  const parts = location.hash
    .replace(/^#\/?/, '')
    .split('/')
    .filter(Boolean)
    .map(decodeURIComponent);
  for (const a of Array.from(document.querySelectorAll('header nav a'))) {
    const target = (a as HTMLAnchorElement).hash.replace(/^#\/?/, '');
    a.toggleAttribute('aria-current', (parts[0] ?? '') === target);
  }
  main.replaceChildren();
  const [view, id, sub] = parts;
  const done =
    view === 'jobs' && id
      ? jobView(id, sub)
      : view === 'jobs'
        ? jobsView()
        : view === 'actors' && id
          ? actorView(id)
          : view === 'actors'
            ? actorsView()
            : clusterView();
  done.catch((err: Error) =>
    main.replaceChildren(
      h('p', { class: 'error', role: 'alert' }, `Could not load: ${err.message}`),
    ),
  );
}

const live = document.getElementById('live') as HTMLElement;
connectLive((ok) => {
  if (page.readOnly) return;
  live.textContent = ok ? '● live' : '○ reconnecting…';
  live.dataset.ok = String(ok);
});
addEventListener('hashchange', route);
void api
  .call('GET /api/version')
  .then((v) => {
    page.readOnly = v.readOnly !== null;
    if (v.readOnly) {
      live.textContent = 'read-only';
      document
        .querySelector('header')
        ?.after(
          h(
            'p',
            { class: 'banner', id: 'read-only' },
            v.readOnly.sessions > 1
              ? `The run history (${v.readOnly.sessions} finished sessions, the newest ${v.readOnly.sessionDir}), served read-only: no cluster is running, so nothing can be stopped or restarted.`
              : `Finished session ${v.readOnly.sessionDir}, served read-only: no cluster is running, so nothing can be stopped or restarted.`,
          ),
        );
    }
  })
  .catch(() => undefined)
  .finally(route);
