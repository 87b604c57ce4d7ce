// Failures a user must be told about: a refused sign-in, an expired session (the stack's
// token_max_age is short), a lost network, and a stale write (two administrators on one client).
import { expect, test } from "@playwright/test";
import { open, shot, signIn, users } from "./helpers.js";

test("a wrong password is refused with the issuer's reason", async ({ page }) => {
  await page.goto("./");
  await page.getByLabel("User name").fill("root");
  await page.getByLabel("Password").fill("not the password");
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByRole("alert")).toContainText("Sign-in refused");
  await expect(page.getByRole("navigation", { name: "Pages" })).toBeHidden();
  await expect(page.getByLabel("Password")).toBeFocused();
  await shot(page, "sign-in-refused");
});

test("a lost network is said plainly, and the console works again once it is back", async ({ page, context }) => {
  await signIn(page, "root");
  await open(page, "Users");
  await context.setOffline(true);
  await page.getByRole("button", { name: "Search" }).click();
  await expect(page.getByRole("alert")).toContainText("cannot be reached");
  await shot(page, "offline");
  await context.setOffline(false);
  await page.getByRole("button", { name: "Search" }).click();
  await expect(page.getByRole("alert")).toBeHidden();
  await expect(page.getByRole("row").filter({ hasText: "carol" })).toBeVisible();
});

test("an expired session goes back to sign-in with a message", async ({ page }) => {
  const maxAge = Number(process.env.MMS_TOKEN_MAX_AGE);
  expect(maxAge).toBeGreaterThan(0);
  test.setTimeout((maxAge + 30) * 1000);
  await signIn(page, "root");
  await open(page, "Users");
  await page.waitForTimeout((maxAge + 2) * 1000);
  await page.getByRole("button", { name: "Search" }).click();
  await expect(page.getByRole("heading", { name: "Sign in" })).toBeVisible();
  await expect(page.getByRole("alert")).toContainText("session has ended");
  await shot(page, "expired");
  await signIn(page, "root", users().root.password);
});

test("a write on an item changed since it was read is refused as stale", async ({ browser }) => {
  const [a, b] = [await browser.newPage(), await browser.newPage()];
  await signIn(a, "root");
  await signIn(b, "root");
  await open(a, "Users");
  await open(b, "Users");
  const carol = (p) => p.getByRole("row").filter({ hasText: "carol" });
  await carol(a).getByRole("button", { name: "Disable carol" }).click();
  await expect(carol(a)).toContainText("no — disabled");
  await carol(b).getByRole("button", { name: "Disable carol" }).click();
  await expect(b.getByRole("alert")).toContainText("Changed by someone else");
  await carol(b).getByRole("button", { name: "Enable carol" }).click();
  await expect(carol(b)).toContainText("yes");
});
