/**
 * What a W&B run holds, the same whether it is sent (`wandb.ts`) or written for `wandb sync`
 * (`wandb-offline.ts`): its id, its config (each setting typed), its history rows (the finite
 * values with `_step`, `_runtime`, `_timestamp`) and its summary (the last value of each key).
 *
 * @module
 */
import type { Row, RunSetting } from './tracker.ts';

/** A W&B run id: eight lowercase letters and digits, as the SDKs make them. */
export function wandbRunId(): string {
  const a = 'abcdefghijklmnopqrstuvwxyz0123456789';
  return Array.from({ length: 8 }, () => a[Math.floor(Math.random() * a.length)]).join('');
}

/** A setting's value as W&B shows it: numbers and booleans typed, the rest text. */
function configValue(v: string): string | number | boolean {
  if (v === 'true' || v === 'false') return v === 'true';
  return v.trim() !== '' && Number.isFinite(Number(v)) ? Number(v) : v;
}

/** The run's config: each setting by its flag name, typed. */
export function wandbConfig(settings: readonly RunSetting[]): Record<string, unknown> {
  return Object.fromEntries(settings.map((s) => [s.name, configValue(s.value)]));
}

/**
 * One history row as W&B stores it: the finite values (its JSON has no NaN) with `_step`,
 * `_runtime` (seconds since the run started) and `_timestamp` (Unix seconds).
 */
export function wandbHistoryRow(row: Row, startedMs: number): Record<string, number> {
  return {
    ...finiteValues(row.values),
    _step: row.step,
    _runtime: (row.time - startedMs) / 1000,
    _timestamp: row.time / 1000,
  };
}

/** The values of a row W&B can hold. */
export function finiteValues(values: Readonly<Record<string, number>>): Record<string, number> {
  return Object.fromEntries(Object.entries(values).filter(([, v]) => Number.isFinite(v)));
}
