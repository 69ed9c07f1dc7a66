/**
 * `npx rtjob …` runs rtjob as npm exec's `sh -c rtjob …`: a SIGTERM to npx ends npm and that
 * shell but never reaches rtjob, which went on as an orphan (a supervisor that stopped
 * `npx rtjob serve` left the server running). A foreground command started by npm exec therefore
 * also stops when its parent process goes away. Only then: `nohup rtjob serve &` from a shell that
 * later exits must keep serving.
 *
 * @module
 */

/** Calls `stop` once this process, started by `npx`, loses its parent; returns a canceller. */
export function onLauncherExit(
  stop: () => void,
  env: Record<string, string | undefined> = process.env,
): () => void {
  if (env.npm_command !== 'exec') return () => {};
  const parent = process.ppid;
  const timer = setInterval(() => {
    if (process.ppid === parent) return;
    clearInterval(timer);
    stop();
  }, 500);
  timer.unref();
  return () => clearInterval(timer);
}
