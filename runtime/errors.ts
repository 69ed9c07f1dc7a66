/**
 * Every error the runtime raises, and {@link RtjobError}, the base every other error class in
 * rtjob extends. Errors cross process boundaries in wire form (`toWire`/`fromWire`) and keep
 * their stable `name`, `code`, context and the remote stack; an error user code throws keeps its
 * own `code` and data fields too. Check them by `code` (or `isRtjobError(e, 'ACTOR_DIED')`),
 * never by bare `instanceof` across a boundary.
 *
 * @module
 */

/** Stable codes, one per error class. */
export type ErrorCode =
  | 'ACTOR_DIED'
  | 'ACTOR_UNAVAILABLE'
  | 'ACTOR_LOAD'
  | 'TASK'
  | 'INFEASIBLE'
  | 'GET_TIMEOUT'
  | 'OBJECT_LOST'
  | 'OWNER_DIED'
  | 'NAME_TAKEN'
  | 'NOT_FOUND'
  | 'PROTOCOL'
  | 'AUTH'
  | 'CONNECTION'
  | 'PLACEMENT_GROUP'
  | 'NOT_INITIALIZED'
  | 'INVALID_ARGUMENT'
  | 'COLLECTIVE'
  | 'TASK_CANCELLED'
  | 'OUT_OF_MEMORY';

/** Who and where, attached to an error so the reader knows which actor or node failed. */
export interface ErrorContext {
  readonly actorId?: string;
  readonly nodeId?: string;
  readonly jobId?: string;
  readonly objectId?: string;
  readonly method?: string;
  readonly exitCode?: number | null;
  readonly signal?: string | null;
  readonly stderrTail?: string[];
  readonly [key: string]: unknown;
}

/** The form an error takes on the wire. */
export interface WireError {
  readonly name: string;
  /** A runtime {@link ErrorCode}, or, when `task` is set, the code user code gave its error. */
  readonly code: string;
  readonly message: string;
  readonly stack?: string;
  readonly context?: ErrorContext;
  readonly cause?: WireError;
  /** Set when user code (an actor method, a task) threw it: it arrives as a {@link TaskError}. */
  readonly task?: true;
  /** The thrown error's own data fields (`readonly promptIndex = 3`), kept across the wire. */
  readonly fields?: Readonly<Record<string, unknown>>;
}

/** What every error constructor takes besides its code and message. */
export interface RtjobErrorOptions {
  context?: ErrorContext;
  cause?: unknown;
  /** Stack of the process where the error was first thrown. */
  remoteStack?: string;
}

/**
 * Base of every error in rtjob, in the runtime and in the layers above it (agents, engines,
 * algorithms, the job API, the CLI). Each subclass fixes its `code` to a string union, so a
 * check by `code` is typed, and returns its class name as a literal `name` (a bundler may rename
 * classes); a subclass outside the tree that does not falls back to its constructor's name.
 *
 * @example
 * export class EngineError extends RtjobError<EngineErrorCode> { ... }
 * if (isRtjobError(e, 'ACTOR_DIED')) console.error(e.context.exitCode);
 */
export class RtjobError<Code extends string = string> extends Error {
  readonly code: Code;
  readonly context: ErrorContext;
  /** Stack of the process where the error was first thrown, when it came over the wire. */
  readonly remoteStack?: string;

  constructor(code: Code, message: string, opts: RtjobErrorOptions = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.code = code;
    this.context = Object.freeze({ ...opts.context });
    if (opts.remoteStack !== undefined) this.remoteStack = opts.remoteStack;
  }

  override get name(): string {
    return this.constructor.name;
  }
}

/** The actor's process died (or it was killed) while the call was in flight, or it is DEAD. */
export class ActorDiedError extends RtjobError<'ACTOR_DIED'> {
  override get name(): string {
    return 'ActorDiedError';
  }

  constructor(message: string, opts: RtjobErrorOptions = {}) {
    super('ACTOR_DIED', message, opts);
  }
}

/** The actor could not be reached but is not known to be dead. */
export class ActorUnavailableError extends RtjobError<'ACTOR_UNAVAILABLE'> {
  override get name(): string {
    return 'ActorUnavailableError';
  }

  constructor(message: string, opts: RtjobErrorOptions = {}) {
    super('ACTOR_UNAVAILABLE', message, opts);
  }
}

/** The actor's module failed to import, lacks the export, or its constructor threw. */
export class ActorLoadError extends RtjobError<'ACTOR_LOAD'> {
  override get name(): string {
    return 'ActorLoadError';
  }

  constructor(message: string, opts: RtjobErrorOptions = {}) {
    super('ACTOR_LOAD', message, opts);
  }
}

/**
 * User code threw inside an actor method or task. `remoteName` is the thrown error's own name
 * (`TypeError`, a user class), `message` its message, `remoteStack` its stack. `code` is the
 * thrown error's own string `code` when it had one (`'AGENT_ERROR_BUDGET'`, `'ENOENT'`), else
 * `'TASK'`; its own data fields (`file`, `promptIndex`, …) are set on this error too, read-only,
 * so a check written for the original class (`e.code === 'X' && e.promptIndex`) works here.
 */
export class TaskError extends RtjobError {
  override get name(): string {
    return 'TaskError';
  }

  readonly remoteName: string;
  /** The names of the fields that came with the thrown error. */
  readonly fieldNames: readonly string[];
  constructor(
    remoteName: string,
    message: string,
    opts: RtjobErrorOptions & { code?: string; fields?: Readonly<Record<string, unknown>> } = {},
  ) {
    super(opts.code ?? 'TASK', message, opts);
    this.remoteName = remoteName;
    const fields = opts.fields ?? {};
    this.fieldNames = Object.freeze(Object.keys(fields).filter((k) => !(k in this)));
    for (const k of this.fieldNames) {
      Object.defineProperty(this, k, { value: fields[k], enumerable: true, writable: false });
    }
  }
}

/** No node in the cluster could ever satisfy the resource request. */
export class InfeasibleError extends RtjobError<'INFEASIBLE'> {
  override get name(): string {
    return 'InfeasibleError';
  }

  constructor(message: string, opts: RtjobErrorOptions = {}) {
    super('INFEASIBLE', message, opts);
  }
}

/** `get`/`wait` ran past `timeoutMs`. */
export class GetTimeoutError extends RtjobError<'GET_TIMEOUT'> {
  override get name(): string {
    return 'GetTimeoutError';
  }

  constructor(message: string, opts: RtjobErrorOptions = {}) {
    super('GET_TIMEOUT', message, opts);
  }
}

/** The object was freed or never existed at its owner. */
export class ObjectLostError extends RtjobError<'OBJECT_LOST'> {
  override get name(): string {
    return 'ObjectLostError';
  }

  constructor(message: string, opts: RtjobErrorOptions = {}) {
    super('OBJECT_LOST', message, opts);
  }
}

/** The process that owned the object is gone, so the object is gone too. */
export class OwnerDiedError extends RtjobError<'OWNER_DIED'> {
  override get name(): string {
    return 'OwnerDiedError';
  }

  constructor(message: string, opts: RtjobErrorOptions = {}) {
    super('OWNER_DIED', message, opts);
  }
}

/** A named actor with this name already exists. */
export class NameTakenError extends RtjobError<'NAME_TAKEN'> {
  override get name(): string {
    return 'NameTakenError';
  }

  constructor(message: string, opts: RtjobErrorOptions = {}) {
    super('NAME_TAKEN', message, opts);
  }
}

/** A lookup (named actor, placement group, node) found nothing. */
export class NotFoundError extends RtjobError<'NOT_FOUND'> {
  override get name(): string {
    return 'NotFoundError';
  }

  constructor(message: string, opts: RtjobErrorOptions = {}) {
    super('NOT_FOUND', message, opts);
  }
}

/** A peer sent something the protocol does not allow. */
export class ProtocolError extends RtjobError<'PROTOCOL'> {
  override get name(): string {
    return 'ProtocolError';
  }

  constructor(message: string, opts: RtjobErrorOptions = {}) {
    super('PROTOCOL', message, opts);
  }
}

/** The connection was refused for a bad or missing token. */
export class AuthError extends RtjobError<'AUTH'> {
  override get name(): string {
    return 'AuthError';
  }

  constructor(message: string, opts: RtjobErrorOptions = {}) {
    super('AUTH', message, opts);
  }
}

/** A connection failed or closed before the reply came. */
export class ConnectionError extends RtjobError<'CONNECTION'> {
  override get name(): string {
    return 'ConnectionError';
  }

  constructor(message: string, opts: RtjobErrorOptions = {}) {
    super('CONNECTION', message, opts);
  }
}

/** A placement group was removed, or could not be created. */
export class PlacementGroupError extends RtjobError<'PLACEMENT_GROUP'> {
  override get name(): string {
    return 'PlacementGroupError';
  }

  constructor(message: string, opts: RtjobErrorOptions = {}) {
    super('PLACEMENT_GROUP', message, opts);
  }
}

/** An API was used before `init()`. */
export class NotInitializedError extends RtjobError<'NOT_INITIALIZED'> {
  override get name(): string {
    return 'NotInitializedError';
  }

  constructor(message = 'rtjob is not initialised: call init() first') {
    super('NOT_INITIALIZED', message);
  }
}

/** A caller passed an option or argument the runtime cannot use. */
export class InvalidArgumentError extends RtjobError<'INVALID_ARGUMENT'> {
  override get name(): string {
    return 'InvalidArgumentError';
  }

  constructor(message: string, opts: RtjobErrorOptions = {}) {
    super('INVALID_ARGUMENT', message, opts);
  }
}

/**
 * A collective operation (all-reduce, broadcast, barrier) or joining its group failed: a member
 * died or left (`reason: 'member-left'`), the operation ran past its timeout (`'timeout'`), the
 * members called different operations or sizes (`'mismatch'`), or the group was destroyed
 * (`'destroyed'`). A group that failed once stays failed: every later call rejects at once.
 */
export class CollectiveError extends RtjobError<'COLLECTIVE'> {
  override get name(): string {
    return 'CollectiveError';
  }

  constructor(message: string, opts: RtjobErrorOptions = {}) {
    super('COLLECTIVE', message, opts);
  }
}

/**
 * The call was cancelled with `cancel(ref)` before it finished: a queued call never started, a
 * running one had its `AbortSignal` aborted (or its worker killed, with `force`).
 */
export class TaskCancelledError extends RtjobError<'TASK_CANCELLED'> {
  override get name(): string {
    return 'TaskCancelledError';
  }
  constructor(message: string, opts: RtjobErrorOptions = {}) {
    super('TASK_CANCELLED', message, opts);
  }
}

/**
 * The node's memory monitor killed the actor's worker: the machine's memory in use passed the
 * node's threshold and this was the most recently started worker. `context` names the node
 * (`nodeId`), the usage (`usedBytes`, `totalBytes`, `threshold`) and the process (`pid`,
 * `rssBytes`).
 */
export class OutOfMemoryError extends RtjobError<'OUT_OF_MEMORY'> {
  override get name(): string {
    return 'OutOfMemoryError';
  }
  constructor(message: string, opts: RtjobErrorOptions = {}) {
    super('OUT_OF_MEMORY', message, opts);
  }
}

type Ctor = new (message: string, opts?: RtjobErrorOptions) => RtjobError;
const byCode: Record<Exclude<ErrorCode, 'TASK' | 'NOT_INITIALIZED'>, Ctor> = {
  ACTOR_DIED: ActorDiedError,
  ACTOR_UNAVAILABLE: ActorUnavailableError,
  ACTOR_LOAD: ActorLoadError,
  INFEASIBLE: InfeasibleError,
  GET_TIMEOUT: GetTimeoutError,
  OBJECT_LOST: ObjectLostError,
  OWNER_DIED: OwnerDiedError,
  NAME_TAKEN: NameTakenError,
  NOT_FOUND: NotFoundError,
  PROTOCOL: ProtocolError,
  AUTH: AuthError,
  CONNECTION: ConnectionError,
  PLACEMENT_GROUP: PlacementGroupError,
  INVALID_ARGUMENT: InvalidArgumentError,
  COLLECTIVE: CollectiveError,
  TASK_CANCELLED: TaskCancelledError,
  OUT_OF_MEMORY: OutOfMemoryError,
};

/** True when `code` names one of the runtime's own error classes. */
export function isRuntimeErrorCode(code: string): code is ErrorCode {
  return code in byCode || code === 'TASK' || code === 'NOT_INITIALIZED';
}

/**
 * True when `e` is an rtjob error, optionally with the given code. Works across module copies
 * and for errors that came over the wire (a remote user error arrives with its own `code`).
 */
export function isRtjobError<C extends string = string>(e: unknown, code?: C): e is RtjobError<C> {
  if (!(e instanceof Error)) return false;
  const c = (e as { code?: unknown }).code;
  if (typeof c !== 'string') return false;
  if (code !== undefined) return c === code;
  return e instanceof RtjobError || isRuntimeErrorCode(c);
}

/** Own data fields of a thrown error, without the ones every error has. */
function ownFields(e: Error): Record<string, unknown> | undefined {
  const skip = new Set(['name', 'message', 'stack', 'cause', 'code', 'context', 'remoteStack']);
  if (e instanceof TaskError) skip.add('remoteName').add('fieldNames');
  let out: Record<string, unknown> | undefined;
  for (const [k, v] of Object.entries(e)) {
    if (skip.has(k) || typeof v === 'function' || typeof v === 'symbol') continue;
    (out ??= {})[k] = v;
  }
  return out;
}

/**
 * The error user code threw, as the {@link TaskError} its caller will see: its name, message,
 * stack, `code` and fields are kept, and `context` (actor id, method) is added.
 */
export function toTaskError(e: unknown, context: ErrorContext): TaskError {
  if (e instanceof TaskError) return e;
  const err = e instanceof Error ? e : new Error(typeof e === 'string' ? e : safeString(e));
  const code = (err as { code?: unknown }).code;
  const fields = ownFields(err);
  return new TaskError(err.name, err.message, {
    context: { ...(err instanceof RtjobError ? err.context : {}), ...context },
    remoteStack: err instanceof RtjobError ? (err.remoteStack ?? err.stack) : err.stack,
    cause: err.cause,
    ...(typeof code === 'string' ? { code } : {}),
    ...(fields ? { fields } : {}),
  });
}

/** True for an error the runtime itself raised (not one user code threw). */
export function isRuntimeError(e: unknown): e is RtjobError<ErrorCode> {
  return e instanceof RtjobError && !(e instanceof TaskError) && isRuntimeErrorCode(e.code);
}

/**
 * Turns any thrown value into wire form. Runtime errors keep their class; anything else is a
 * user error and travels with its own name, `code` and fields.
 */
export function toWire(e: unknown, depth = 0): WireError {
  const err = e instanceof Error ? e : undefined;
  const cause = err?.cause !== undefined && depth < 4 ? toWire(err.cause, depth + 1) : undefined;
  if (isRuntimeError(e)) {
    return {
      name: e.name,
      code: e.code,
      message: e.message,
      stack: e.remoteStack ?? e.stack,
      context: e.context,
      ...(cause ? { cause } : {}),
    };
  }
  if (err) {
    const code = (err as { code?: unknown }).code;
    const fields = err instanceof TaskError ? pick(err, err.fieldNames) : ownFields(err);
    return {
      name: err instanceof TaskError ? err.remoteName : err.name,
      code: typeof code === 'string' ? code : 'TASK',
      message: err.message,
      stack: err instanceof RtjobError ? (err.remoteStack ?? err.stack) : err.stack,
      ...(err instanceof RtjobError && Object.keys(err.context).length > 0
        ? { context: err.context }
        : {}),
      task: true,
      ...(fields && Object.keys(fields).length > 0 ? { fields } : {}),
      ...(cause ? { cause } : {}),
    };
  }
  return {
    name: 'Error',
    code: 'TASK',
    message: typeof e === 'string' ? e : safeString(e),
    task: true,
  };
}

function pick(o: object, keys: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const k of keys) out[k] = (o as Record<string, unknown>)[k];
  return out;
}

/** Rebuilds a typed error from wire form; `extra` context (e.g. the actor id) is merged in. */
export function fromWire(w: WireError, extra?: ErrorContext): RtjobError {
  const context = { ...w.context, ...extra };
  const opts = {
    context,
    remoteStack: w.stack,
    cause: w.cause ? fromWire(w.cause) : undefined,
  };
  if (w.task || w.code === 'TASK' || !isRuntimeErrorCode(w.code)) {
    return new TaskError(w.name, w.message, {
      ...opts,
      code: w.code,
      ...(w.fields ? { fields: w.fields } : {}),
    });
  }
  if (w.code === 'NOT_INITIALIZED') return new NotInitializedError(w.message);
  const C = byCode[w.code as Exclude<ErrorCode, 'TASK' | 'NOT_INITIALIZED'>];
  return new C(w.message, opts);
}

function safeString(v: unknown): string {
  try {
    return String(v);
  } catch {
    return 'unprintable error value';
  }
}
