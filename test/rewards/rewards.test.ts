import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  convertWordNumber,
  evaluateNumeric,
  extractAnswer,
  gsm8kReward,
  mathEqual,
  parseDigits,
  stripString,
} from '../../rewards/index.ts';
import * as published from 'rtjob/rewards';

const GOLD_72 =
  'Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72';

test('extractAnswer: boxed answers, nested braces, last boxed wins, unclosed brace', () => {
  assert.is(extractAnswer('so \\boxed{72}.'), '72');
  assert.is(extractAnswer('\\boxed{\\frac{1}{2}}'), '\\frac{1}{2}');
  assert.is(extractAnswer('\\boxed{\\dfrac{3}{4}}'), '\\frac{3}{4}');
  assert.is(extractAnswer('first \\boxed{1} then \\boxed{2}'), '2');
  assert.is(extractAnswer('$\\boxed 5$ done'), '5');
  assert.is(extractAnswer('\\boxed{72'), '72');
  assert.is(extractAnswer('\\boxed{}'), '');
  assert.is(extractAnswer('\\boxed{{1,2}}'), '{1,2}');
});

test('extractAnswer: "The answer is", "final answer is", 答案是, and no marker', () => {
  assert.is(extractAnswer('The answer is 18.'), '18');
  assert.is(extractAnswer('the answer is: 18'), '18');
  assert.is(extractAnswer('The answer is $1,000.'), '1,000');
  assert.is(extractAnswer('So the final answer is 7'), '7');
  assert.is(extractAnswer('The final answer is $42$. I hope it is correct.'), '42');
  assert.is(extractAnswer('所以答案是 12\n\n解释'), '12');
  assert.is(extractAnswer('she has 72 clips'), '');
  assert.is(extractAnswer('she has 72 clips', { useLastNumber: true }), '72');
  assert.is(extractAnswer(GOLD_72, { useLastNumber: true }), '72');
  assert.is(extractAnswer('Total: 1,234,567 #### 1,234,567', { useLastNumber: true }), '1234567');
  assert.is(extractAnswer('#### -5', { useLastNumber: true }), '-5');
});

test('stripString: units, dollars, text, percent, trailing zeros, fractions', () => {
  assert.is(stripString('12 apples'), '12');
  assert.is(stripString('5 hours'), '5');
  assert.is(stripString('\\$18'), '18');
  assert.is(stripString('18 \\text{ dollars}'), '18');
  assert.is(stripString('\\text{18}'), '18');
  assert.is(stripString('50\\%'), '50');
  assert.is(stripString('50%'), '50');
  assert.is(stripString('72.00'), '72');
  assert.is(stripString('2.50'), '2.50');
  assert.is(stripString('.5'), '0.5');
  assert.is(stripString('x = 3'), '3');
  assert.is(stripString('k=7'), '7');
  assert.is(stripString('\\frac12'), '\\frac{1}{2}');
  assert.is(stripString('3/4'), '\\frac{3}{4}');
  assert.is(stripString('90^\\circ'), '90');
  assert.is(stripString('\\sqrt2'), '\\sqrt{2}');
  assert.is(stripString('\\left( 1, 2 \\right)'), '(1,2)');
  assert.is(stripString('m'), 'm');
});

test('word numbers follow word2number', () => {
  assert.is(convertWordNumber('five'), '5');
  assert.is(convertWordNumber('twenty-five'), '25');
  assert.is(convertWordNumber('one hundred and twenty three'), '123');
  assert.is(convertWordNumber('two thousand five hundred'), '2500');
  assert.is(convertWordNumber('three point five'), '3.5');
  assert.is(convertWordNumber('007'), '7');
  assert.is(convertWordNumber('3.5'), '3.5');
  assert.is(convertWordNumber('thousand thousand'), 'thousand thousand');
  assert.is(extractAnswer('The answer is five.'), '5');
});

test('mathEqual: strings, numbers, the ±percent quirk, symbolic fallbacks', () => {
  assert.ok(mathEqual('72', '72'));
  assert.ok(mathEqual('72.0', '72'));
  assert.ok(mathEqual('1,000', '1000'));
  assert.ok(mathEqual('0.72', '72'));
  assert.ok(mathEqual('7200', '72'));
  assert.ok(mathEqual('72.005', '72'));
  assert.not.ok(mathEqual('72.1', '72'));
  assert.not.ok(mathEqual('-72', '72'));
  assert.ok(mathEqual('-5', '-5'));
  assert.ok(mathEqual('\\frac{144}{2}', '72'));
  assert.ok(mathEqual('\\frac{1}{2}', '0.5'));
  assert.ok(mathEqual('(1,2)', '(1, 2)'));
  assert.ok(mathEqual('x=3', '3'));
  assert.ok(mathEqual('2\\sqrt{4}', '4'));
  assert.not.ok(mathEqual('x+1', '2'));
  assert.not.ok(mathEqual('', '72'));
  assert.not.ok(mathEqual(undefined, '72'));
  assert.is(parseDigits('50%'), 0.5);
  assert.is(parseDigits('1_000'), 1000);
  assert.is(parseDigits('abc'), undefined);
  assert.is(evaluateNumeric('3^2+\\frac{1}{2}'), 9.5);
  assert.is(evaluateNumeric('\\sqrt[3]{27}'), 3);
  assert.is(evaluateNumeric('2('), undefined);
});

test('gsm8kReward (AReaL rule): a broad table', () => {
  const cases: [string, string, 0 | 1][] = [
    ['So she sold \\boxed{72} clips.', GOLD_72, 1],
    ['The answer is 72.', GOLD_72, 1],
    ['The answer is 72 apples.', GOLD_72, 1],
    // "clips" is not in the reference's unit list, so it stays and the answer reads "72clips"
    ['The answer is 72 clips.', GOLD_72, 0],
    ['\\boxed{72.00}', GOLD_72, 1],
    ['\\boxed{\\$72}', GOLD_72, 1],
    ['\\boxed{0.72}', GOLD_72, 1],
    ['\\boxed{\\frac{144}{2}}', GOLD_72, 1],
    ['\\boxed{seventy two}', GOLD_72, 1],
    ['\\boxed{71}', GOLD_72, 0],
    ['she sold 72 clips', GOLD_72, 0],
    ['\\boxed{1,000}', 'blah #### 1,000', 1],
    ['The answer is $1,000.', 'blah #### 1000', 1],
    ['\\boxed{-3}', 'so the change is -3\n#### -3', 1],
    ['\\boxed{3}', 'so the change is -3\n#### -3', 0],
    ['\\boxed{2.5}', '#### 2.5', 1],
    ['\\boxed{25\\%}', '#### 25', 1],
    ['\\boxed{\\frac{5}{2}}', '#### 2.5', 1],
    ['', GOLD_72, 0],
    ['\\boxed{', GOLD_72, 0],
    ['\\boxed{}', GOLD_72, 0],
    ['\\boxed{None}', GOLD_72, 0],
    ['The answer is', GOLD_72, 0],
    ['\\boxed{72}', '', 0],
    ['\\boxed{72}', 'no numbers here', 0],
    ['}}}{{{\\boxed{{{', GOLD_72, 0],
    ['\u0000\uffff\\boxed{\ud800}', GOLD_72, 0],
  ];
  for (const [completion, gold, want] of cases) {
    assert.is(
      gsm8kReward(completion, gold),
      want,
      `${JSON.stringify(completion)} vs ${JSON.stringify(gold.slice(-12))}`,
    );
  }
});

test('gsm8kReward never throws on malformed input', () => {
  for (const bad of [undefined, null, 42, {}, [], Symbol('x')]) {
    assert.is(gsm8kReward(bad, GOLD_72), 0);
    assert.is(gsm8kReward('\\boxed{72}', bad), 0);
  }
  assert.is(gsm8kReward('\\boxed{' + '{'.repeat(10000), GOLD_72), 0);
  assert.is(gsm8kReward('The answer is ' + '9'.repeat(400), GOLD_72), 0);
});

test('verl strict and flexible modes', () => {
  assert.is(gsm8kReward('She sold 72 clips.\n#### 72', GOLD_72, { mode: 'strict' }), 1);
  assert.is(gsm8kReward('#### 1,000', '#### 1,000', { mode: 'strict' }), 1);
  assert.is(gsm8kReward('#### $72', GOLD_72, { mode: 'strict' }), 0);
  assert.is(gsm8kReward('\\boxed{72}', GOLD_72, { mode: 'strict' }), 0);
  assert.is(gsm8kReward('#### 72' + ' padding'.repeat(40), GOLD_72, { mode: 'strict' }), 0);
  assert.is(gsm8kReward('#### 71\nactually #### 72', GOLD_72, { mode: 'strict' }), 1);
  assert.is(gsm8kReward('it is 72.', GOLD_72, { mode: 'flexible' }), 0);
  assert.is(gsm8kReward('it is 72 .', GOLD_72, { mode: 'flexible' }), 1);
  assert.is(gsm8kReward('no digits', GOLD_72, { mode: 'flexible' }), 0);
});

test("agents import the same functions from 'rtjob/rewards'", () => {
  assert.is(published.gsm8kReward, gsm8kReward);
  assert.is(published.extractAnswer, extractAnswer);
  assert.is(published.mathEqual, mathEqual);
});

test.run();
