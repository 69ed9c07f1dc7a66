/**
 * Weights by reference across nodes (`test/chaos/weights.ts`): on three node agent processes, the
 * trainer's weights reach each other node once, however many engines it has (counted by the
 * owners' object stores), and every engine ends with the trainer's SHA-256.
 */
import { test } from 'uvu';
import { weightsAcrossNodes } from '../chaos/weights.ts';

test('each other node fetches the trainer weights once, however many engines it has; all hold its bits', async () => {
  await weightsAcrossNodes();
});

test.run();
