/**
 * Fixtures for engine tests: fake servers whose generator never emits eos by itself (so budgets
 * run out deterministically) and checkpoint directories the fakes load.
 *
 * @module
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import type { Test } from 'uvu';

import type { RemoteEngine } from '../../engines/http/remote-engine.ts';
import type { ServerEvent } from '../../engines/http/server-pool.ts';
import type { FakeServer } from '../fakes/fake-server.ts';
import { DeterministicGenerator } from '../fakes/token-generator.ts';

export const vocabSize = 64;
export const prompt = [5, 9, 13, 2, 40];

/** A generator with no eos in its vocabulary and `tokenDelayMs` of simulated compute per token. */
export function testGenerator(tokenDelayMs = 1): DeterministicGenerator {
  return new DeterministicGenerator({ vocabSize, eosTokenId: 10_000, tokenDelayMs });
}

/** A temp directory removed by `cleanup`. */
export function tempDir(): { path: string; cleanup: () => void } {
  const path = mkdtempSync(join(tmpdir(), 'rtjob-engines-'));
  return { path, cleanup: () => rmSync(path, { recursive: true, force: true }) };
}

/** Writes fake weights for `version` into `dir` and returns `dir`. */
export function writeFakeCheckpoint(dir: string, version: number): string {
  writeFileSync(join(dir, 'fake-weights.json'), JSON.stringify({ seed: version * 7919 + 3 }));
  return dir;
}

/** Resolves once `fake` has a request running that produced a token after this call. */
export function whenGenerating(fake: FakeServer): () => Promise<void> {
  return () => {
    const base = fake.stats.tokensGenerated;
    return fake.waitFor(() => fake.stats.running > 0 && fake.stats.tokensGenerated > base);
  };
}

/**
 * Returns `own`: what a test passes to it (fakes, engines) is closed after that test, newest
 * first, whether it passed or not.
 */
export function closedAfterEach(suite: Test): <T extends { close(): Promise<void> }>(x: T) => T {
  const open: Array<{ close(): Promise<void> }> = [];
  suite.after.each(async () => {
    for (const x of open.splice(0).reverse()) await x.close();
  });
  return (x) => {
    open.push(x);
    return x;
  };
}

/** Resolves with the first `type` event `engine` tells of from now on; rejects after `timeoutMs`. */
export function nextEvent(
  engine: RemoteEngine,
  type: ServerEvent['type'],
  timeoutMs = 10_000,
): Promise<ServerEvent> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      stop();
      reject(new Error(`no ${type} event in ${timeoutMs} ms`));
    }, timeoutMs);
    const stop = engine.onServerEvent((e) => {
      if (e.type !== type) return;
      clearTimeout(timer);
      stop();
      resolve(e);
    });
  });
}
