/**
 * What the dashboard's views share: the element they render into, the state of the page (the
 * current view's cleanup, read-only mode, the job page on screen), and small helpers.
 *
 * @module
 */
import { type JobInfo, onLive } from './api.ts';
import { duration } from '../../../runtime/format.ts';
import { h } from './dom.ts';

/** Where a view renders. */
export const main = document.getElementById('main') as HTMLElement;

/** State of the page across views. */
export const page: {
  /** Cleanup of the current view (timers, sockets, subscriptions). */
  teardown: (() => void)[];
  /** Set when the head serves a finished session: nothing can be changed from the page. */
  readOnly: boolean;
  /** The job page on screen, so switching its tabs does not rebuild it. */
  jobPage: { jobId: string; show(tab: string | undefined): void } | null;
} = { teardown: [], readOnly: false, jobPage: null };

/** Why a control is off in read-only mode. */
export const readOnlyWhy = 'a finished session, served read-only (no cluster running)';

/** Re-runs `load` on the events named, at most every `minMs`. */
export function refreshOn(
  events: string[],
  load: () => Promise<void>,
  match: (data: unknown) => boolean = () => true,
  minMs = 500,
): void {
  let timer: ReturnType<typeof setTimeout> | undefined;
  let last = 0;
  const off = onLive((event, data) => {
    if (!events.includes(event) || !match(data) || timer) return;
    timer = setTimeout(
      () => {
        timer = undefined;
        last = Date.now();
        void load().catch(() => undefined);
      },
      Math.max(0, minMs - (Date.now() - last)),
    );
  });
  page.teardown.push(off, () => timer && clearTimeout(timer));
}

/** A link to a job's page. */
export function jobLink(id: string): HTMLElement {
  return h('a', { href: `#/jobs/${encodeURIComponent(id)}` }, id);
}

/** How long a job ran (or has run so far). */
export function jobDuration(j: JobInfo): string {
  return j.startedAt ? duration((j.endedAt ?? Date.now()) - j.startedAt) : '–';
}
