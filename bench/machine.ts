/**
 * The machine a benchmark ran on, as its tables name it: lscpu's model name and the CPUs.
 *
 * @module
 */
import { execFileSync } from 'node:child_process';
import { cpus } from 'node:os';

/** `AMD EPYC, 2 CPUs`: lscpu's model name (else Node's), and the CPU count. */
export function cpuModel(): string {
  let name = cpus()[0]?.model ?? 'unknown CPU';
  try {
    name =
      /Model name:\s*(.+)/.exec(execFileSync('lscpu', { encoding: 'utf8' }))?.[1]?.trim() ?? name;
  } catch {
    // No lscpu: Node's name.
  }
  return `${name}, ${cpus().length} CPUs`;
}
