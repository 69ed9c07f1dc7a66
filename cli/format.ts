/**
 * Plain-text tables, times and units for the CLI's human output (every command also has
 * `--json`). Durations and byte sizes are in `runtime/format.ts`, shared with the dashboard.
 *
 * @module
 */
import { InvalidArgumentError } from '../runtime/index.ts';

/** Pads columns to their widest cell. */
export function table(header: string[], rows: (string | number)[][]): string {
  const cells = [header, ...rows.map((r) => r.map(String))];
  const widths = header.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)));
  return cells
    .map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!))).join('  '))
    .join('\n');
}

export function localTime(ms: number | null): string {
  if (ms === null) return '-';
  const d = new Date(ms);
  const p = (n: number) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

/** Parses `K=V` pairs; throws on a pair without `=`. */
export function parseEnvPairs(pairs: readonly string[]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const p of pairs) {
    const eq = p.indexOf('=');
    if (eq <= 0)
      throw new InvalidArgumentError(`--env expects KEY=VALUE, got ${JSON.stringify(p)}`);
    env[p.slice(0, eq)] = p.slice(eq + 1);
  }
  return env;
}

/**
 * A port flag's value: an integer 0–65535 (0 picks a free port); anything else is a usage error
 * naming the flag.
 */
export function parsePort(flag: string, v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0 || n > 65535)
    throw new InvalidArgumentError(`${flag} must be a port number 0-65535, got ${v}`);
  return n;
}
