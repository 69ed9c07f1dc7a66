/**
 * SGLang's in-memory weight routes (`engines/http/distributed-weights.ts`):
 * `/init_weights_update_group {master_address, master_port, rank_offset, world_size, group_name,
 * backend}` joins the trainer's group (its tensor-parallel ranks from `rank_offset`),
 * `/update_weights_from_distributed {names, dtypes, shapes, group_name, flush_cache,
 * weight_version}` receives one broadcast per name and loads it (the version and a cache flush
 * on the last bucket), `/destroy_weights_update_group {group_name}` leaves. Each answers
 * `{success, message}`.
 *
 * @module
 */
import type { DistributedRoutes, ServerCall } from '../http/distributed-weights.ts';
import { EngineError } from '../http/errors.ts';

async function succeeded(call: ServerCall, path: string, body: unknown): Promise<void> {
  const res = (await call(path, body)) as { success?: boolean; message?: string } | null;
  if (!res || res.success !== true)
    throw new EngineError('HTTP_STATUS', `${path.slice(1)} failed: ${res?.message ?? 'no answer'}`);
}

/** SGLang's routes for weights broadcast from the trainer. */
export const sglangDistributedRoutes: DistributedRoutes = {
  init: (call, i) =>
    succeeded(call, '/init_weights_update_group', {
      master_address: i.masterAddress,
      master_port: i.masterPort,
      rank_offset: i.rankOffset,
      world_size: i.worldSize,
      group_name: i.groupName,
      backend: i.backend,
    }),
  destroy: (call, groupName) =>
    succeeded(call, '/destroy_weights_update_group', { group_name: groupName }),
  receive: (call, b, groupName, version) =>
    succeeded(call, '/update_weights_from_distributed', {
      names: b.names,
      dtypes: b.dtypes,
      shapes: b.shapes,
      group_name: groupName,
      flush_cache: version !== undefined,
      abort_all_requests: false,
      ...(version !== undefined ? { weight_version: String(version) } : {}),
    }),
};
