import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { agent } from '../fixtures/agents/mastra-agent.ts';
import { addToolModel, compactToolTemplate, suiteGateway, tokenizerWith } from './helpers.ts';

// A Mastra agent (`@mastra/core`'s Agent with a createTool tool, on the AI SDK's OpenAI
// provider), unmodified, against the gateway: its tool loop is recorded as one exact-token
// trajectory.
const tok = tokenizerWith(compactToolTemplate);
const gateway = suiteGateway(test, {
  engine: addToolModel(tok, { answer: (result) => `The answer is ${JSON.parse(result).sum}.` })
    .engine,
  tokenizer: tok,
});

test('a Mastra agent with a tool: the call is run, its result answered, one trajectory', async () => {
  const s = gateway.gw.openSession();
  const out = await agent(
    { prompt: 'What is 2+3?', index: 0, groupId: 'g', record: {}, promptIds: [], nSamples: 1 },
    {
      baseURL: gateway.gw.baseURL,
      apiKey: s.apiKey,
      model: 'tiny',
      signal: new AbortController().signal,
    },
  );
  assert.equal(out, { reward: 1, extraInfo: { steps: 2 } });
  const st = s.session.stats;
  assert.is(st.completions, 2);
  assert.is(st.trajectories, 1, 'the answer after the tool result extends the call');
  const [t] = s.session.trajectories(1, { groupId: 'g', promptIndex: 0 });
  const text = tok.decode(t!.inputIds, { skipSpecialTokens: false });
  assert.match(text, /<tool_response>\{"sum":5\}<\/tool_response><\|assistant\|>The answer is 5\./);
});

test.run();
