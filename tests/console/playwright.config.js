// Playwright for the console's tests: Debian's Chromium (MMS_CHROMIUM), headless, never a
// downloaded browser; one worker, as the specs share one issuer whose state they change in
// order. The Rust test `console` in tests/tests/through_envoy/ starts the stack and runs this.
import { defineConfig } from "@playwright/test";

const chromium = process.env.MMS_CHROMIUM;
if (!chromium) throw new Error("MMS_CHROMIUM must name Chromium (Debian's /usr/bin/chromium)");
const out = process.env.MMS_CONSOLE_OUT ?? "../../target/console-results";

export default defineConfig({
  testDir: ".",
  testMatch: "*.spec.js",
  workers: 1,
  fullyParallel: false,
  retries: 0,
  timeout: 60_000,
  expect: { timeout: 10_000 },
  reporter: [["list"]],
  outputDir: out,
  use: {
    baseURL: process.env.MMS_CONSOLE_URL,
    headless: true,
    viewport: { width: 1280, height: 800 },
    launchOptions: { executablePath: chromium, args: ["--no-sandbox", "--disable-gpu", "--disable-quic"] },
    trace: "off",
    screenshot: "only-on-failure",
  },
});
