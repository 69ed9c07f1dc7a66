/**
 * Human units for people reading rtjob's output: durations and byte sizes. Pure (no Node or DOM
 * imports): the CLI imports it, and so does the dashboard's browser bundle.
 *
 * @module
 */

/**
 * `12.3s`, `3m 05s`, `1h 02m`; a negative duration (clock skew between machines) reads as 0.
 *
 * @example
 * duration(185_000); // '3m 05s'
 */
export function duration(ms: number): string {
  if (!(ms > 0)) ms = 0;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)}s`;
  const s = Math.floor(ms / 1000);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  return h > 0
    ? `${h}h ${String(m).padStart(2, '0')}m`
    : `${m}m ${String(s % 60).padStart(2, '0')}s`;
}

/**
 * Binary units with one decimal: `512 B`, `1.5 KiB`, `3.2 GiB`.
 *
 * @example
 * bytes(1536); // '1.5 KiB'
 */
export function bytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${n.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}

const byteUnits: Record<string, number> = {
  '': 1,
  b: 1,
  k: 1e3,
  kb: 1e3,
  kib: 2 ** 10,
  m: 1e6,
  mb: 1e6,
  mib: 2 ** 20,
  g: 1e9,
  gb: 1e9,
  gib: 2 ** 30,
  t: 1e12,
  tb: 1e12,
  tib: 2 ** 40,
};

/**
 * A byte size a person wrote (`2GiB`, `512MB`, `1.5G`, `1000000`), as a whole number of bytes;
 * undefined when it is not one. Decimal units are powers of 1000, binary (`KiB`…) of 1024.
 *
 * @example
 * parseBytes('2GiB'); // 2147483648
 */
export function parseBytes(text: string): number | undefined {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$/i.exec(text);
  const unit = m ? byteUnits[m[2]!.toLowerCase()] : undefined;
  if (!m || unit === undefined) return undefined;
  return Math.floor(Number(m[1]) * unit);
}
