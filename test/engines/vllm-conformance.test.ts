import { suite } from 'uvu';

import { VllmEngine } from '../../engines/vllm/index.ts';
import { FakeVllmServer } from '../fakes/vllm-server.ts';
import { registerConformance } from './conformance.ts';
import {
  prompt,
  tempDir,
  testGenerator,
  vocabSize,
  whenGenerating,
  writeFakeCheckpoint,
} from './fake-fixtures.ts';

const test = suite('vllm engine conformance (fake vLLM server)');
let fake: FakeVllmServer;
const dir = tempDir();

test.before(async () => {
  fake = await FakeVllmServer.start({ generator: testGenerator(1), modelPath: dir.path });
});
test.after(async () => {
  await fake.close();
  dir.cleanup();
});

// The default reload route (sleep level 2 → wake weights → reload_weights → wake KV cache)
// reloads the served directory, so checkpoints are written there.
registerConformance(
  test,
  async () =>
    new VllmEngine({ urls: [fake.url], servedModelPath: dir.path, healthIntervalMs: 200 }),
  {
    prompt,
    vocabSize,
    weightUpdate: async (v) => ({ kind: 'disk', path: writeFakeCheckpoint(dir.path, v) }),
    whenGenerating: () => whenGenerating(fake)(),
  },
);

test.run();
