/**
 * Every error the runtime raises, in one place. Errors cross process boundaries in wire form
 * (`toWire`/`fromWire`) and keep their stable `name`, `code`, context and the remote stack.
 * Check them by `code` (or `isRtjobError(e, 'ACTOR_DIED')`), never by bare `instanceof` across a
 * boundary.
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
  | 'COLLECTIVE';

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
  readonly code: ErrorCode;
  readonly message: string;
  readonly stack?: string;
  readonly context?: ErrorContext;
  readonly cause?: WireError;
}

/** Base of every runtime error. */
export class RtjobError extends Error {
  readonly code: ErrorCode;
  readonly context: ErrorContext;
  /** Stack of the process where the error was first thrown, when it came over the wire. */
  readonly remoteStack?: string;

  constructor(
    code: ErrorCode,
    message: string,
    opts: { context?: ErrorContext; cause?: unknown; remoteStack?: string } = {},
  ) {
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
export class ActorDiedError extends RtjobError {
  constructor(message: string, opts: ConstructorParameters<typeof RtjobError>[2] = {}) {
    super('ACTOR_DIED', message, opts);
  }
}

/** The actor could not be reached but is not known to be dead. */
export class ActorUnavailableError extends RtjobError {
  constructor(message: string, opts: ConstructorParameters<typeof RtjobError>[2] = {}) {
    super('ACTOR_UNAVAILABLE', message, opts);
  }
}

/** The actor's module failed to import, lacks the export, or its constructor threw. */
export class ActorLoadError extends RtjobError {
  constructor(message: string, opts: ConstructorParameters<typeof RtjobError>[2] = {}) {
    super('ACTOR_LOAD', message, opts);
  }
}

/**
 * User code threw inside an actor method or task. `remoteName` is the thrown error's own name
 * (`TypeError`, a user class), `message` its message, `remoteStack` its stack.
 */
export class TaskError extends RtjobError {
  readonly remoteName: string;
  constructor(
    remoteName: string,
    message: string,
    opts: ConstructorParameters<typeof RtjobError>[2] = {},
  ) {
    super('TASK', message, opts);
    this.remoteName = remoteName;
  }
}

/** No node in the cluster could ever satisfy the resource request. */
export class InfeasibleError extends RtjobError {
  constructor(message: string, opts: ConstructorParameters<typeof RtjobError>[2] = {}) {
    super('INFEASIBLE', message, opts);
  }
}

/** `get`/`wait` ran past `timeoutMs`. */
export class GetTimeoutError extends RtjobError {
  constructor(message: string, opts: ConstructorParameters<typeof RtjobError>[2] = {}) {
    super('GET_TIMEOUT', message, opts);
  }
}

/** The object was freed or never existed at its owner. */
export class ObjectLostError extends RtjobError {
  constructor(message: string, opts: ConstructorParameters<typeof RtjobError>[2] = {}) {
    super('OBJECT_LOST', message, opts);
  }
}

/** The process that owned the object is gone, so the object is gone too. */
export class OwnerDiedError extends RtjobError {
  constructor(message: string, opts: ConstructorParameters<typeof RtjobError>[2] = {}) {
    super('OWNER_DIED', message, opts);
  }
}

/** A named actor with this name already exists. */
export class NameTakenError extends RtjobError {
  constructor(message: string, opts: ConstructorParameters<typeof RtjobError>[2] = {}) {
    super('NAME_TAKEN', message, opts);
  }
}

/** A lookup (named actor, placement group, node) found nothing. */
export class NotFoundError extends RtjobError {
  constructor(message: string, opts: ConstructorParameters<typeof RtjobError>[2] = {}) {
    super('NOT_FOUND', message, opts);
  }
}

/** A peer sent something the protocol does not allow. */
export class ProtocolError extends RtjobError {
  constructor(message: string, opts: ConstructorParameters<typeof RtjobError>[2] = {}) {
    super('PROTOCOL', message, opts);
  }
}

/** The connection was refused for a bad or missing token. */
export class AuthError extends RtjobError {
  constructor(message: string, opts: ConstructorParameters<typeof RtjobError>[2] = {}) {
    super('AUTH', message, opts);
  }
}

/** A connection failed or closed before the reply came. */
export class ConnectionError extends RtjobError {
  constructor(message: string, opts: ConstructorParameters<typeof RtjobError>[2] = {}) {
    super('CONNECTION', message, opts);
  }
}

/** A placement group was removed, or could not be created. */
export class PlacementGroupError extends RtjobError {
  constructor(message: string, opts: ConstructorParameters<typeof RtjobError>[2] = {}) {
    super('PLACEMENT_GROUP', message, opts);
  }
}

/** An API was used before `init()`. */
export class NotInitializedError extends RtjobError {
  constructor(message = 'rtjob is not initialised: call init() first') {
    super('NOT_INITIALIZED', message);
  }
}

/** A caller passed an option or argument the runtime cannot use. */
export class InvalidArgumentError extends RtjobError {
  constructor(message: string, opts: ConstructorParameters<typeof RtjobError>[2] = {}) {
    super('INVALID_ARGUMENT', message, opts);
  }
}

/**
 * A collective operation (all-reduce, broadcast, barrier) or joining its group failed: a member
 * died or left (`reason: 'member-left'`), the operation ran past its timeout (`'timeout'`), the
 * members called different operations or sizes (`'mismatch'`), or the group was destroyed
 * (`'destroyed'`). A group that failed once stays failed: every later call rejects at once.
 */
export class CollectiveError extends RtjobError {
  constructor(message: string, opts: ConstructorParameters<typeof RtjobError>[2] = {}) {
    super('COLLECTIVE', message, opts);
  }
}

type Ctor = new (message: string, opts?: ConstructorParameters<typeof RtjobError>[2]) => RtjobError;
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
};

/** True when `e` is a runtime error, optionally with the given code. Works across boundaries. */
export function isRtjobError(e: unknown, code?: ErrorCode): e is RtjobError {
  if (typeof e !== 'object' || e === null) return false;
  const c = (e as { code?: unknown }).code;
  if (typeof c !== 'string' || !(e instanceof Error)) return false;
  return code === undefined ? c in byCode || c === 'TASK' || c === 'NOT_INITIALIZED' : c === code;
}

/** Turns any thrown value into wire form. User errors become `TASK` with their own name. */
export function toWire(e: unknown, depth = 0): WireError {
  if (e instanceof RtjobError) {
    const cause = e.cause !== undefined && depth < 4 ? toWire(e.cause, depth + 1) : undefined;
    return {
      name: e instanceof TaskError ? e.remoteName : e.name,
      code: e.code,
      message: e.message,
      stack: e.remoteStack ?? e.stack,
      context: e.context,
      ...(cause ? { cause } : {}),
    };
  }
  if (e instanceof Error) {
    const cause = e.cause !== undefined && depth < 4 ? toWire(e.cause, depth + 1) : undefined;
    return {
      name: e.name,
      code: 'TASK',
      message: e.message,
      stack: e.stack,
      ...(cause ? { cause } : {}),
    };
  }
  return { name: 'Error', code: 'TASK', message: typeof e === 'string' ? e : safeString(e) };
}

/** Rebuilds a typed error from wire form; `extra` context (e.g. the actor id) is merged in. */
export function fromWire(w: WireError, extra?: ErrorContext): RtjobError {
  const context = { ...w.context, ...extra };
  const opts = {
    context,
    remoteStack: w.stack,
    cause: w.cause ? fromWire(w.cause) : undefined,
  };
  if (w.code === 'TASK') return new TaskError(w.name, w.message, opts);
  if (w.code === 'NOT_INITIALIZED') return new NotInitializedError(w.message);
  const C = byCode[w.code] ?? ProtocolError;
  return new C(w.message, opts);
}

function safeString(v: unknown): string {
  try {
    return String(v);
  } catch {
    return 'unprintable error value';
  }
}
