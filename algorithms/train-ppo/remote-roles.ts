/**
 * Places the roles through the runtime as actors.
 *
 * @module
 */
import type { TrainPpoOptions } from './flags.ts';
import { inProcessRoles, type Roles } from './roles.ts';

/** The roles as actors; until the runtime API lands, in this process. */
export async function remoteRoles(o: TrainPpoOptions, totalSteps: number): Promise<Roles> {
  return inProcessRoles(o, totalSteps);
}
