/**
 * `rtjob dashboard`: the running head's login link, or the run history served read-only.
 *
 * @module
 */
import { CliError } from '../client.ts';
import { readClusterFile, rtjobHome, sessionServer } from '../../ops/index.ts';
import { parsePort } from '../format.ts';

/** Why the head at `url` does not answer its version route within 2 s, or undefined when it does. */
async function headUnreachable(url: string): Promise<string | undefined> {
  try {
    const res = await fetch(`${url}/api/version`, { signal: AbortSignal.timeout(2000) });
    await res.body?.cancel();
    return undefined;
  } catch (err) {
    const e = err as Error & { cause?: Error };
    return e.cause?.message ?? e.message;
  }
}

/**
 * `rtjob dashboard [--session DIR] [--port N]`: the login link of the running cluster's dashboard;
 * with no cluster running (or with `--session`), serves the latest finished session (or DIR)
 * read-only here until Ctrl-C.
 */
export async function dashboardCommand(
  o: { session?: string; port?: string; host?: string } = {},
): Promise<void> {
  const info = readClusterFile({ live: true });
  if (!o.session && info?.dashboardUrl) {
    // A live process of the cluster (a node agent) does not mean its head answers: ask it.
    const why = await headUnreachable(info.dashboardUrl);
    if (why === undefined) {
      console.log(`${info.dashboardUrl}/login?token=${encodeURIComponent(info.token)}`);
      return;
    }
    process.stderr.write(
      `no head answers at ${info.dashboardUrl} (${why}): on its machine, \`rtjob start --head\` starts it again; serving the run history read-only meanwhile\n`,
    );
  }
  const { isSessionDir, listSessions, serveSession } = await sessionServer();
  const [dir, ...older] = o.session ? [o.session] : listSessions(rtjobHome());
  if (!dir)
    throw new CliError(
      'no cluster is running and no finished session is on this machine: start one with `rtjob start --head`, or run a job with `rtjob submit`',
      3,
    );
  if (!isSessionDir(dir))
    throw new CliError(`--session ${dir}: not a session dir (no head.sqlite in it)`, 2);
  let port: number;
  try {
    port = parsePort('--port', o.port ?? '8265');
  } catch (err) {
    throw new CliError((err as Error).message, 2);
  }
  const s = await serveSession({
    sessionDir: dir,
    port,
    host: o.host ?? '127.0.0.1',
    olderSessionDirs: older,
  }).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'EADDRINUSE')
      throw new CliError(`port ${port} is in use: pass --port N (0 picks a free one)`, 2);
    throw err;
  });
  process.stderr.write(
    older.length
      ? `serving the run history (${older.length + 1} finished sessions under ${rtjobHome()}) read-only (no cluster running); Ctrl-C to stop\n`
      : `serving the finished session ${dir} read-only (no cluster running); Ctrl-C to stop\n`,
  );
  console.log(`${s.url}/login?token=${encodeURIComponent(s.token)}`);
  await new Promise<void>((resolve) => {
    const stop = () => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      resolve();
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
  await s.close();
}
