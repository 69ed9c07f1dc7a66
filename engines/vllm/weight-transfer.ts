/**
 * vLLM's weight-transfer routes (`engines/http/distributed-weights.ts`):
 * `/init_weight_transfer_engine {init_info: {master_address, master_port, rank_offset,
 * world_size}}` joins the trainer's group, then per update `/start_weight_update
 * {is_checkpoint_format: true}`, `/update_weights {update_info: {names, dtype_names, shapes}}`
 * per bucket (one broadcast per name), and `/finish_weight_update`, after which the server
 * serves the new weights (the engine tags the version; vLLM keeps none).
 *
 * @module
 */
import type { DistributedRoutes } from '../http/distributed-weights.ts';

/** vLLM's routes for weights broadcast from the trainer. */
export const vllmWeightTransferRoutes: DistributedRoutes = {
  async init(call, i) {
    await call('/init_weight_transfer_engine', {
      init_info: {
        master_address: i.masterAddress,
        master_port: i.masterPort,
        rank_offset: i.rankOffset,
        world_size: i.worldSize,
      },
    });
  },
  // vLLM keeps one transfer engine per server; the next init replaces it.
  destroy: async () => {},
  async begin(call) {
    await call('/start_weight_update', { is_checkpoint_format: true });
  },
  async receive(call, b) {
    await call('/update_weights', {
      update_info: { names: b.names, dtype_names: b.dtypes, shapes: b.shapes },
    });
  },
  async finish(call) {
    await call('/finish_weight_update', {});
  },
};
