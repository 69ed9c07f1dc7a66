// What `rtjob submit -- train_ppo` refuses before any cluster starts, for a ported OpenRLHF
// command line: dataset keys read from the user's own file (the built-in held-out set is not
// evaluated unless --eval-dataset asks for it), and v0.11 dotted names quoted as typed.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { Sandbox } from './helpers.ts';

const sb = new Sandbox();
test.after(() => sb.cleanup());

const prompts = (): string => {
  const path = join(sb.home, 'prompts.jsonl');
  writeFileSync(path, '{"question": "What is 2 + 3?", "answer": "5"}\n');
  return path;
};

const refused = async (flags: string[], re: RegExp): Promise<void> => {
  const r = await sb.run(['submit', '--', 'train_ppo', ...flags]);
  assert.is(r.code, 2, r.stderr);
  assert.match(r.stderr, re);
  assert.not.match(r.stderr, /started a local one/);
};

test("a wrong --input_key of the user's own data fails before the start, naming its fields (H8)", async () => {
  await refused(
    ['--prompt_data', prompts(), '--input_key', 'prompt', '--label_key', 'answer'],
    /train_ppo: --input-key 'prompt' is neither a string field nor chat messages of --prompt-data records \(fields: question, answer\)/,
  );
  await refused(
    [
      '--data.prompt_dataset',
      prompts(),
      '--data.input_key',
      'question',
      '--data.label_key',
      'solution',
    ],
    /--label-key 'solution' is not a field of --prompt-data records \(fields: question, answer\)/,
  );
  // The keys are checked against an --eval-dataset the user names, too.
  await refused(
    [
      '--prompt_data',
      prompts(),
      '--input_key',
      'question',
      '--label_key',
      'answer',
      '--eval_dataset',
      prompts().replace('prompts', 'missing'),
    ],
    /--eval-dataset: '.*missing\.jsonl' is neither a built-in dataset/,
  );
});

test('a dotted flag of OpenRLHF v0.11 rtjob does not take is quoted as typed (H7)', async () => {
  await refused(
    ['--ds.ring_attn_size', '2'],
    /train_ppo: unknown flag --ds\.ring_attn_size: not applicable/,
  );
});

test('a .py agent says how an OpenRLHF AgentExecutor ports, before the start (H12)', async () => {
  writeFileSync(join(sb.home, 'agent.py'), 'class AgentExecutor: pass\n');
  await refused(
    ['--agent_func_path', './agent.py'],
    /--agent-func: \.\/agent\.py is Python; rtjob loads a \.ts or \.js module\. An OpenRLHF AgentInstance ports as export async function step/,
  );
});

test('a GPU request on the private cluster, which has no GPUs, fails before it starts (H10)', async () => {
  await refused(
    ['--vllm_num_engines', '1', '--vllm_tensor_parallel_size', '1'],
    /rtjob: train_ppo: --rollout-num-gpus-per-engine \(--vllm_tensor_parallel_size\) 1 asks 1 GPU per engine; the cluster has no GPUs/,
  );
});

test.run();
