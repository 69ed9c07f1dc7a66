import { suite } from 'uvu';

import { SglangEngine } from '../../engines/sglang/index.ts';
import { FakeSglangServer } from '../fakes/sglang-server.ts';
import { registerConformance } from './conformance.ts';
import {
  prompt,
  tempDir,
  testGenerator,
  vocabSize,
  whenGenerating,
  writeFakeCheckpoint,
} from './fake-fixtures.ts';

const test = suite('sglang engine conformance (fake SGLang server)');
let fake: FakeSglangServer;
const dir = tempDir();

test.before(async () => {
  fake = await FakeSglangServer.start({ generator: testGenerator(1), modelPath: dir.path });
});
test.after(async () => {
  await fake.close();
  dir.cleanup();
});

registerConformance(
  test,
  async () => new SglangEngine({ urls: [fake.url], healthIntervalMs: 200 }),
  {
    prompt,
    vocabSize,
    weightUpdate: async (v) => ({ kind: 'disk', path: writeFakeCheckpoint(dir.path, v) }),
    whenGenerating: () => whenGenerating(fake)(),
  },
);

test.run();
