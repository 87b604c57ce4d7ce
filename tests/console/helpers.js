// What the console's specs share: the stack's facts from the environment (set by the Rust test
// that started it), signing in, and screenshots into a git-ignored folder, copied to
// docs/console/ when MMS_UPDATE_SHOTS=1.
import { expect } from "@playwright/test";
import fs from "node:fs";
import path from "node:path";

const need = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run these specs through the Rust test that starts the stack`);
  return v;
};

/** The users the Rust test made: name → { password, roles }. */
export const users = () => JSON.parse(need("MMS_CONSOLE_USERS"));
/** The id of the client registered with a vendor statement, pending until activated. */
export const vendorClient = () => need("MMS_VENDOR_CLIENT");

/** Signs in as `name` and waits for the navigation. */
export async function signIn(page, name, password = users()[name].password) {
  await page.goto("./");
  await page.getByLabel("User name").fill(name);
  await page.getByLabel("Password").fill(password);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByRole("status")).toHaveText(`Signed in as ${name}.`);
}

/** Goes to the page titled `title` by the navigation, as a user would. */
export async function open(page, title) {
  await page.getByRole("navigation", { name: "Pages" }).getByRole("link", { name: title, exact: true }).click();
  await expect(page.getByRole("heading", { level: 1, name: title })).toBeVisible();
}

const shotsDir = process.env.MMS_SHOTS_DIR ?? "../../target/console-shots";
const docsDir = new URL("../../docs/console/", import.meta.url).pathname;

/** A screenshot of the whole page as `name`.png; copied into docs/console/ with MMS_UPDATE_SHOTS=1. */
export async function shot(page, name) {
  fs.mkdirSync(shotsDir, { recursive: true });
  const file = path.join(shotsDir, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  if (process.env.MMS_UPDATE_SHOTS === "1") {
    fs.mkdirSync(docsDir, { recursive: true });
    fs.copyFileSync(file, path.join(docsDir, `${name}.png`));
  }
}

/** The admin API called from inside the page with the page's own token and key (the module the
 * console uses), bypassing what the page shows: `{ status, kind, message }` or the answer. */
export async function apiFromPage(page, method, apiPath, body) {
  return page.evaluate(
    async ([m, p, b]) => {
      const { api } = await import("./api.js");
      try {
        return { status: 200, answer: await api(m, p, b === null ? {} : { body: b, etag: "*" }) };
      } catch (e) {
        return { status: e.status, kind: e.kind, message: e.message };
      }
    },
    [method, apiPath, body ?? null],
  );
}
