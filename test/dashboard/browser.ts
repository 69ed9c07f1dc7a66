/**
 * The dashboard tests' browser: Debian's Chromium driven by playwright-core (never a browser
 * download), headless.
 */
import { type Browser, chromium } from 'playwright-core';

/** Starts headless Chromium from `/usr/bin/chromium`. */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
}
