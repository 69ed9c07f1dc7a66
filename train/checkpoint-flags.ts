/**
 * The checkpoint and dataset flags of the drivers, resolved through the one Hub resolver
 * (`model/hub/`) before anything starts: a Hub id becomes its snapshot folder
 * `…/snapshots/<commit>`, so the roles the driver starts all load that one commit.
 *
 * @module
 */
import {
  resolveCheckpointSpec,
  type CheckpointSpecOptions,
  type HubEnv,
} from '../model/hub/index.ts';
import { resolveDatasetSpecs } from './data/hub-data.ts';

/** Option key → the flag users write, for every option of a driver that names a checkpoint. */
export type CheckpointFlags<T> = Partial<Record<keyof T & string, string>>;

/** train_ppo's checkpoint flags. */
export const ppoCheckpointFlags = {
  pretrain: '--pretrain',
  rewardPretrain: '--reward-pretrain',
  teacherPretrain: '--teacher-pretrain',
  loadLora: '--load-lora',
} as const;

/** train_sft's and train_rm's checkpoint flags. */
export const sftCheckpointFlags = { pretrain: '--pretrain', loadLora: '--load-lora' } as const;

/**
 * `o` with each checkpoint flag in `flags` resolved to a local folder (one at a time, so the
 * progress lines do not interleave); other options as they were.
 *
 * @example
 * const o = await resolveCheckpointFlags(args.options, ppoCheckpointFlags);
 */
export async function resolveCheckpointFlags<T extends object>(
  o: T,
  flags: CheckpointFlags<T>,
  opts: CheckpointSpecOptions = {},
): Promise<T> {
  return resolveFlags(o, flags, (spec, flag) => resolveCheckpointSpec(spec, flag, opts));
}

/** `o` with each non-empty string option named in `flags` replaced by `resolve(value, flag)`, in order. */
async function resolveFlags<T extends object>(
  o: T,
  flags: CheckpointFlags<T>,
  resolve: (spec: string, flag: string) => Promise<string>,
): Promise<T> {
  const out = { ...o } as Record<string, unknown>;
  for (const [key, flag] of Object.entries(flags) as [string, string][]) {
    const spec = out[key];
    if (typeof spec === 'string' && spec !== '') out[key] = await resolve(spec, flag);
  }
  return out as T;
}

/** train_ppo's dataset flags. */
export const ppoDatasetFlags = {
  promptData: '--prompt-data',
  evalDataset: '--eval-dataset',
} as const;

/**
 * `o` with each dataset flag in `flags` resolved: its Hub datasets fetched and replaced by their
 * snapshot folders (`train/data/hub-data.ts`), local parts as given.
 *
 * @example
 * const o = await resolveDatasetFlags(args.options, ppoDatasetFlags);
 */
export async function resolveDatasetFlags<T extends object>(
  o: T,
  flags: CheckpointFlags<T>,
  opts: { env?: HubEnv } = {},
): Promise<T> {
  return resolveFlags(o, flags, (spec, flag) => resolveDatasetSpecs(spec, flag, opts));
}

/**
 * train_ppo's checkpoint and dataset flags resolved, each Hub id pinned to one commit, before any
 * role starts.
 */
export async function resolvePpoHubFlags<T extends object>(o: T, env: HubEnv): Promise<T> {
  const pinned = await resolveCheckpointFlags(o, ppoCheckpointFlags as CheckpointFlags<T>, { env });
  return resolveDatasetFlags(pinned, ppoDatasetFlags as CheckpointFlags<T>, { env });
}
