/**
 * Where the Hub is and who is asking, read from the environment variables huggingface_hub reads,
 * so rtjob and Python tools share one cache and one login.
 *
 * @module
 */
import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';

/** The environment the resolver reads (`process.env` unless a caller passes its own). */
export type HubEnv = Readonly<Record<string, string | undefined>>;

/** The Hub settings of one environment, resolved. */
export interface HubSettings {
  /** The cache's root, holding `models--org--name/` and `datasets--org--name/`. */
  readonly cacheDir: string;
  /** The Hub's base URL, without a trailing slash (`HF_ENDPOINT` for a mirror). */
  readonly endpoint: string;
  /** The bearer token, if one is set or saved by `hf auth login`. */
  readonly token: string | undefined;
  /** `HF_HUB_OFFLINE`: the cache only, never a request. */
  readonly offline: boolean;
}

const set = (v: string | undefined): string | undefined => (v && v.trim() ? v.trim() : undefined);
const truthy = (v: string | undefined): boolean => /^(1|true|yes|on)$/i.test(v?.trim() ?? '');

/**
 * `HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub` (`XDG_CACHE_HOME` moves
 * `~/.cache`, as in huggingface_hub).
 */
export function hubCacheDir(env: HubEnv = process.env): string {
  return set(env.HF_HUB_CACHE) ?? set(env.HUGGINGFACE_HUB_CACHE) ?? join(hfHome(env), 'hub');
}

function hfHome(env: HubEnv): string {
  const cache = set(env.XDG_CACHE_HOME) ?? join(set(env.HOME) ?? homedir(), '.cache');
  return set(env.HF_HOME) ?? join(cache, 'huggingface');
}

/**
 * `HF_TOKEN`, else `HUGGING_FACE_HUB_TOKEN`, else the token file (`HF_TOKEN_PATH`, else
 * `HF_HOME/token`) that `hf auth login` writes.
 */
export function hubToken(env: HubEnv = process.env): string | undefined {
  const direct = set(env.HF_TOKEN) ?? set(env.HUGGING_FACE_HUB_TOKEN);
  if (direct) return direct;
  try {
    return set(readFileSync(set(env.HF_TOKEN_PATH) ?? join(hfHome(env), 'token'), 'utf8'));
  } catch {
    return undefined;
  }
}

/** Everything the resolver reads from `env`, once. */
export function hubSettings(env: HubEnv = process.env): HubSettings {
  return {
    cacheDir: hubCacheDir(env),
    endpoint: (set(env.HF_ENDPOINT) ?? 'https://huggingface.co').replace(/\/+$/, ''),
    token: hubToken(env),
    offline: truthy(env.HF_HUB_OFFLINE) || truthy(env.TRANSFORMERS_OFFLINE),
  };
}
