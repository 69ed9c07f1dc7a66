/**
 * Whether a process exists, the one check the CLI, the job supervisor and the tests share.
 *
 * @module
 */

/**
 * True when a process with this pid exists, also one of another user (signal 0 is refused with
 * `EPERM` then, which still proves it exists).
 *
 * @example
 * if (!pidAlive(info.headPid)) console.log('the head is gone');
 */
export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
