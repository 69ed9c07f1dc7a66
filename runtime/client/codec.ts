/**
 * Teaches the msgpack codec about object refs and actor handles, so they can be passed inside
 * call arguments, results and constructor arguments. A ref decoded in its owner counts as a local
 * reference; elsewhere it is a borrow the owner is told about.
 *
 * @module
 */
import { ActorHandleCore, kCore, makeHandle } from '../handles.ts';
import { registerWireClass } from '../protocol.ts';
import { callWithOptions } from './actor-client.ts';
import { ObjectRef } from './object-ref.ts';
import { currentRuntime } from './runtime.ts';
import { installShmCodec } from './shm.ts';
import { NotInitializedError } from '../errors.ts';

let installed = false;

/** Registers the extensions once per process. */
export function installCodec(): void {
  if (installed) return;
  installed = true;
  installShmCodec();
  registerWireClass<ObjectRef<unknown>, [string, string]>({
    type: 1,
    Class: ObjectRef,
    write(ref) {
      currentRuntime()?.objects.onSend(ref);
      return [ref.id, ref.owner];
    },
    read([id, owner]) {
      const rt = currentRuntime();
      if (!rt) return new ObjectRef(id, owner, true);
      return rt.objects.adopt(id, owner);
    },
  });
  registerWireClass<ActorHandleCore, [string, number]>({
    type: 2,
    Class: ActorHandleCore,
    write(h) {
      // `h` is the handle proxy; its own properties are method names, so read the core.
      const core = (h as unknown as { [kCore]: ActorHandleCore })[kCore];
      return [core.actorId, core.maxTaskRetries];
    },
    read([actorId, retries]) {
      return handleFor(actorId, retries) as unknown as ActorHandleCore;
    },
  });
}

/** A handle to an existing actor, through this process's runtime. */
export function handleFor(actorId: string, maxTaskRetries: number): unknown {
  const core = new ActorHandleCore(actorId, maxTaskRetries);
  return makeHandle(core, (method, args, opts) => {
    const rt = currentRuntime();
    if (!rt) throw new NotInitializedError();
    return callWithOptions(rt.actor(actorId, undefined, maxTaskRetries), method, args, opts);
  });
}
