/**
 * A concurrency group on a thread of its own (`concurrencyGroups: { compute: { thread: true } }`):
 * the worker's main thread keeps its event loop (the other groups, object fetches, health
 * probes) while a method of this group computes without awaiting. The thread
 * (`group-thread-main.ts`) holds its own instance of the actor class, built from the same
 * constructor arguments; calls cross by `postMessage`, so arguments and results are
 * structured-cloned (typed arrays and plain data; not handles or functions).
 *
 * @module
 */
import { Worker } from 'node:worker_threads';
import { ActorLoadError, fromWire, type WireError } from '../errors.ts';
import { ownModule } from '../own-files.ts';

/** What the thread is started with (`workerData`). */
export interface GroupThreadData {
  spec: { moduleUrl: string; exportName: string };
  args: unknown[];
  actorId: string;
  group: string;
}

/** Main thread → group thread. */
export type ToThread =
  | { t: 'call'; id: number; method: string; args: unknown[] }
  | { t: 'cancel'; id: number };

/** Group thread → main thread. */
type FromThread =
  | { t: 'ready' }
  | { t: 'failed'; error: WireError }
  | { t: 'done'; id: number; value: unknown }
  | { t: 'error'; id: number; error: WireError };

interface Pending {
  resolve(v: unknown): void;
  reject(e: unknown): void;
}

/** The modules of `--import` flags in `argv` (`--import x` or `--import=x`). */
function preloads(argv: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--import' && i + 1 < argv.length) out.push(argv[++i]!);
    else if (a.startsWith('--import=')) out.push(a.slice('--import='.length));
  }
  return out;
}

/** One group's thread, as the executor uses it. */
export class GroupThread {
  private readonly pending = new Map<number, Pending>();
  private nextId = 0;

  private constructor(
    private readonly worker: Worker,
    readonly group: string,
  ) {}

  /**
   * Starts the thread and waits until it has constructed its instance; a constructor that
   * throws fails with `ActorLoadError`. `onDeath` is told if the thread ends later (an uncaught
   * error there): the actor cannot go on without the group.
   */
  static start(data: GroupThreadData, onDeath: (why: string) => void): Promise<GroupThread> {
    const entry = ownModule('./group-thread-main.ts', import.meta.url).href;
    // The thread runs the process's `--import` preloads first (the worker's TypeScript loader:
    // a thread does not inherit the module hooks they register), then its entry.
    const modules = [...preloads(process.execArgv), entry].map((m) => JSON.stringify(m));
    const code = `(async () => { for (const m of [${modules.join(', ')}]) await import(m); })()`;
    const worker = new Worker(code, { eval: true, workerData: data });
    const t = new GroupThread(worker, data.group);
    return new Promise((resolve, reject) => {
      let ready = false;
      const failed = (why: string, cause?: unknown) => {
        const err = new ActorLoadError(`concurrency group '${data.group}' thread: ${why}`, {
          context: { actorId: data.actorId },
          cause,
        });
        // Later, the process ends with it: its callers see the actor die (ActorDiedError).
        if (!ready) return reject(err);
        onDeath(err.message);
      };
      worker.on('message', (m: FromThread) => {
        if (m.t === 'ready') {
          ready = true;
          resolve(t);
        } else if (m.t === 'failed') {
          const e = fromWire(m.error);
          failed(e.message, e);
          void worker.terminate();
        } else {
          const p = t.pending.get(m.id);
          if (!p) return;
          t.pending.delete(m.id);
          if (m.t === 'done') p.resolve(m.value);
          else p.reject(fromWire(m.error));
        }
      });
      worker.on('error', (e) => failed(`uncaught ${e.name}: ${e.message}`, e));
      worker.on('exit', (code) => failed(`exited with code ${code}`));
    });
  }

  /** Runs `method(...args)` on the thread; `id` names it for `cancel`. */
  call(method: string, args: unknown[]): { id: number; result: Promise<unknown> } {
    const id = this.nextId++;
    // Posted first: arguments that cannot be cloned throw here, before anything is pending.
    this.worker.postMessage({ t: 'call', id, method, args } satisfies ToThread);
    const result = new Promise((resolve, reject) => this.pending.set(id, { resolve, reject }));
    return { id, result };
  }

  /** Aborts the `callSignal()` of call `id` if it is still running there. */
  cancel(id: number): void {
    this.worker.postMessage({ t: 'cancel', id } satisfies ToThread);
  }
}
