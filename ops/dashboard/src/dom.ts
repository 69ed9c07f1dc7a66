/**
 * A tiny element builder and the helpers every view shares (durations and byte sizes come from
 * `runtime/format.ts`, shared with the CLI).
 *
 * @module
 */

type Child = Node | string | number | null | undefined | false;

/** `h('a', { href: '#/' }, 'Cluster')` — attributes starting with `on` become listeners. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | number | boolean | EventListener | undefined> = {},
  ...children: (Child | Child[])[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(typeof c === 'object' ? c : String(c));
  }
  return el;
}

export function time(ms: number | null): string {
  return ms === null ? '–' : new Date(ms).toLocaleString();
}

/** A state badge; colour comes from the `data-state` attribute in the stylesheet. */
export function badge(state: string): HTMLElement {
  return h('span', { class: 'badge', 'data-state': state }, state);
}

/** A labelled horizontal bar for used/total. */
export function bar(label: string, used: number, total: number, text: string): HTMLElement {
  const pct = total > 0 ? Math.min(100, (used / total) * 100) : 0;
  return h(
    'div',
    {
      class: 'bar',
      role: 'meter',
      'aria-label': label,
      'aria-valuemin': 0,
      'aria-valuemax': total,
      'aria-valuenow': used,
    },
    h('span', { class: 'bar-label' }, label),
    h(
      'span',
      { class: 'bar-track' },
      h('span', { class: 'bar-fill', style: `width:${pct.toFixed(1)}%` }),
    ),
    h('span', { class: 'bar-text' }, text),
  );
}

/**
 * Asks for confirmation in the page's modal dialog; resolves true on Confirm. Cancel has the
 * focus, so an Enter pressed out of habit does nothing destructive.
 */
export function confirmAction(text: string): Promise<boolean> {
  const dialog = document.getElementById('confirm') as HTMLDialogElement;
  (document.getElementById('confirm-text') as HTMLElement).textContent = text;
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true });
    dialog.returnValue = 'cancel';
    dialog.showModal();
    (document.getElementById('confirm-cancel') as HTMLButtonElement).focus();
  });
}

/** Shows a transient message at the bottom of the page (errors from actions). */
export function toast(text: string): void {
  const el = h('div', { class: 'toast', role: 'status' }, text);
  document.body.append(el);
  setTimeout(() => el.remove(), 5000);
}
